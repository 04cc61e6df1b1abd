#include "core/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace actorflow {

std::string file_kind(unsigned mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  const std::string name = what + " '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    const std::string msg = "cannot open " + name + ": " + std::strerror(e);
    if (e == ENOENT || e == ENOTDIR) return NotFound(msg);
    if (e == EACCES || e == EPERM) return PermissionDenied(msg);
    return Unavailable(msg);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Unavailable("cannot stat " + name + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(name + " is " + file_kind(st.st_mode) + ", not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return ResourceExhausted(name + " is " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                             std::to_string(max_bytes));
  std::string out;
  out.resize(static_cast<size_t>(st.st_size) + 1);  // one more: notices a file that grew
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (out.size() > max_bytes) break;
      out.resize(std::min<uint64_t>(max_bytes + 1, out.size() * 2));
    }
    const ssize_t r = ::read(fd, &out[got], out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Unavailable("read of " + name + " failed: " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got > max_bytes)
    return ResourceExhausted(name + " grew past the limit of " + std::to_string(max_bytes) + " bytes while read");
  out.resize(got);
  return out;
}

}  // namespace actorflow
