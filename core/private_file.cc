#include "core/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace actorflow {
namespace {

Status io_error(const std::string& what, const std::string& path, int e) {
  const std::string msg = what + " '" + path + "': " + std::strerror(e);
  if (e == EACCES || e == EPERM) return PermissionDenied(msg);
  return Unavailable(msg);
}

// Removes the temporary file unless released.
struct TempFile {
  std::string path;
  int fd = -1;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

Status write_private_file(const std::string& path, const std::string& data, bool overwrite) {
  if (path.empty()) return InvalidArgument("write_private_file: empty path");
  std::string templ = path + ".tmp.XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  TempFile tmp;
  // mkostemp creates the file with mode 0600 (O_CREAT | O_EXCL): no moment with a wider mode.
  tmp.fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (tmp.fd < 0) return io_error("cannot write", path, errno);
  tmp.path = name.data();
  for (size_t off = 0; off < data.size();) {
    const ssize_t w = ::write(tmp.fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error("writing", path, w < 0 ? errno : EIO);
    off += static_cast<size_t>(w);
  }
  if (::fsync(tmp.fd) != 0) return io_error("writing", path, errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) return io_error("writing", path, errno);
  if (overwrite) {
    if (::rename(tmp.path.c_str(), path.c_str()) != 0) return io_error("cannot rename a temporary file to", path, errno);
    tmp.path.clear();
    return Status::OK();
  }
  if (::link(tmp.path.c_str(), path.c_str()) != 0) {
    const int e = errno;
    if (e == EEXIST) return AlreadyExists("'" + path + "' already exists");
    return io_error("cannot create", path, e);
  }
  return Status::OK();  // the temporary name is unlinked by tmp
}

}  // namespace actorflow
