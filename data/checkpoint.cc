#include "data/checkpoint.h"

#include "core/file_read.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "core/logging.h"
#include "data/crc32c.h"
#include "data/tf/tf_checkpoint_data.h"

namespace actorflow {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint tensors are stored little-endian; add byte swapping for big-endian hosts");

constexpr size_t kTrailerBytes = 5;  // msgpack uint32: 0xce + 4 bytes big-endian
constexpr const char* kIndexName = "checkpoint";

std::string errno_text(int e) { return std::strerror(e); }

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes now; returns the close() error, if any.
  int reset() {
    int r = 0;
    if (fd_ >= 0) r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

Status write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Unavailable("write to " + path + " failed: " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

Status fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Unavailable("cannot open directory " + dir + " to fsync it: " + errno_text(errno));
  if (::fsync(fd.get()) != 0) return Unavailable("fsync of directory " + dir + " failed: " + errno_text(errno));
  return Status::OK();
}

Status make_dirs(const std::string& dir) {
  if (dir.empty()) return Status::OK();
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    size_t next = dir.find('/', pos + 1);
    cur = dir.substr(0, next);
    pos = next;
    if (cur.empty() || cur == "/") continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return Unavailable("cannot create directory " + cur + ": " + errno_text(errno));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Unavailable("checkpoint directory " + dir + " is not a directory");
  return Status::OK();
}

// The msgpack packer's output stream: buffered writes to a descriptor, CRC-32C of every byte.
// Remembers the first error (the packer ignores return values).
class CrcFileStream {
 public:
  CrcFileStream(int fd, std::string path) : fd_(fd), path_(std::move(path)) { buf_.reserve(kBuf); }
  void write(const char* p, size_t n) {
    if (!status_.ok()) return;
    crc_ = crc32c_extend(crc_, p, n);
    if (buf_.size() + n > kBuf) flush();
    if (n >= kBuf) {
      if (status_.ok()) status_ = write_all(fd_, p, n, path_);
      return;
    }
    buf_.insert(buf_.end(), p, p + n);
  }
  void flush() {
    if (!buf_.empty() && status_.ok()) status_ = write_all(fd_, buf_.data(), buf_.size(), path_);
    buf_.clear();
  }
  uint32_t crc() const { return crc_; }
  const Status& status() const { return status_; }

 private:
  static constexpr size_t kBuf = 1 << 20;
  int fd_;
  std::string path_;
  std::vector<char> buf_;
  uint32_t crc_ = 0;
  Status status_;
};

void pack_string(msgpack::packer<CrcFileStream>& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void run_hook(const SaveHook& hook, SavePoint p) {
  if (hook) hook(p);
}

// Reads the whole file into `out`.
Status read_file(const std::string& path, std::string* out) {
  // O_NONBLOCK: a FIFO in the checkpoint's place must not hang the reader; it is refused below.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) {
    int e = errno;
    if (e == ENOENT) return NotFound("checkpoint " + path + " does not exist");
    return Unavailable("cannot open checkpoint " + path + ": " + errno_text(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Unavailable("cannot stat checkpoint " + path + ": " + errno_text(errno));
  if (!S_ISREG(st.st_mode))
    return InvalidArgument("checkpoint " + path + " is " + file_kind(st.st_mode) + ", not a regular file");
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    ssize_t r = ::read(fd.get(), &(*out)[got], out->size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Unavailable("read of checkpoint " + path + " failed: " + errno_text(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out->resize(got);
  return Status::OK();
}

bool reference_bin(msgpack::type::object_type type, std::size_t, void*) {
  return type == msgpack::type::BIN;  // tensor bytes stay in the file buffer until copied out
}

const msgpack::object* map_get(const msgpack::object& m, const char* key) {
  for (uint32_t i = 0; i < m.via.map.size; ++i) {
    const msgpack::object_kv& kv = m.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && kv.key.via.str.size == std::strlen(key) &&
        std::memcmp(kv.key.via.str.ptr, key, kv.key.via.str.size) == 0)
      return &kv.val;
  }
  return nullptr;
}

bool as_int64(const msgpack::object& o, int64_t* v) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) return false;
    *v = static_cast<int64_t>(o.via.u64);
    return true;
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    *v = o.via.i64;
    return true;
  }
  return false;
}

std::string as_string(const msgpack::object& o) { return std::string(o.via.str.ptr, o.via.str.size); }

Result<CheckpointData> decode_body(const std::string& path, const msgpack::object& root) {
  auto bad = [&](const std::string& what) { return DataLoss("checkpoint " + path + " is malformed: " + what); };
  if (root.type != msgpack::type::MAP) return bad("the body is not a map");
  const msgpack::object* format = map_get(root, "format");
  if (!format || format->type != msgpack::type::STR || as_string(*format) != kCheckpointFormat)
    return bad(std::string("format name is not \"") + kCheckpointFormat + "\"");
  const msgpack::object* version = map_get(root, "version");
  int64_t ver = 0;
  if (!version || !as_int64(*version, &ver)) return bad("missing version");
  if (ver > kCheckpointVersion || ver < 1)
    return Unimplemented("checkpoint " + path + " has format version " + std::to_string(ver) +
                         "; this build reads version " + std::to_string(kCheckpointVersion));
  CheckpointData data;
  const msgpack::object* step = map_get(root, "global_step");
  if (!step || !as_int64(*step, &data.global_step)) return bad("missing or non-integer global_step");
  if (data.global_step < 0) return bad("negative global_step " + std::to_string(data.global_step));
  const msgpack::object* vars = map_get(root, "variables");
  if (!vars || vars->type != msgpack::type::ARRAY) return bad("missing variables array");
  for (uint32_t i = 0; i < vars->via.array.size; ++i) {
    const msgpack::object& v = vars->via.array.ptr[i];
    const std::string where = "variable #" + std::to_string(i);
    if (v.type != msgpack::type::MAP) return bad(where + " is not a map");
    const msgpack::object* name = map_get(v, "name");
    const msgpack::object* dtype = map_get(v, "dtype");
    const msgpack::object* shape = map_get(v, "shape");
    const msgpack::object* bytes = map_get(v, "data");
    if (!name || name->type != msgpack::type::STR) return bad(where + " has no name");
    const std::string vname = as_string(*name);
    const std::string vwhere = "variable '" + vname + "'";
    if (!dtype || dtype->type != msgpack::type::STR) return bad(vwhere + " has no dtype");
    auto dt = dtype_from_name(as_string(*dtype));
    if (!dt.ok() || *dt == DType::kInvalid) return bad(vwhere + " has unknown dtype '" + as_string(*dtype) + "'");
    if (!shape || shape->type != msgpack::type::ARRAY) return bad(vwhere + " has no shape");
    std::vector<int64_t> dims;
    uint64_t elems = 1;
    for (uint32_t d = 0; d < shape->via.array.size; ++d) {
      int64_t dim = 0;
      if (!as_int64(shape->via.array.ptr[d], &dim) || dim < 0) return bad(vwhere + " has a bad dimension");
      if (dim != 0 && elems > (uint64_t{1} << 40) / static_cast<uint64_t>(dim)) return bad(vwhere + " has an absurd shape");
      elems *= static_cast<uint64_t>(dim);
      dims.push_back(dim);
    }
    if (!bytes || bytes->type != msgpack::type::BIN) return bad(vwhere + " has no data");
    const uint64_t want = elems * dtype_size(*dt);
    if (bytes->via.bin.size != want)
      return bad(vwhere + " of " + dtype_name(*dt) + " " + Shape(dims).to_string() + " needs " +
                 std::to_string(want) + " bytes but holds " + std::to_string(bytes->via.bin.size));
    if (*dt == DType::kBool)
      for (uint64_t b = 0; b < want; ++b)
        if (static_cast<unsigned char>(bytes->via.bin.ptr[b]) > 1)
          return bad(vwhere + " (bool) holds byte " +
                     std::to_string(static_cast<unsigned char>(bytes->via.bin.ptr[b])) + " at element " +
                     std::to_string(b) + ", not 0 or 1");
    AF_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(cpu_allocator(), *dt, Shape(std::move(dims))));
    if (want) std::memcpy(t.raw_data(), bytes->via.bin.ptr, static_cast<size_t>(want));
    if (!data.variables.emplace(vname, std::move(t)).second) return bad("duplicate " + vwhere);
  }
  // Optional: where each saved variable lived ({name: {place, parts: [{variable, offset, rows,
  // place}]}); files without it read with none.
  if (const msgpack::object* pl = map_get(root, "placement")) {
    if (pl->type != msgpack::type::MAP) return bad("placement is not a map");
    if (pl->via.map.size > vars->via.array.size) return bad("placement lists more variables than the file holds");
    auto str = [](const msgpack::object* o, std::string* out) {
      if (!o || o->type != msgpack::type::STR || o->via.str.size > 4096) return false;
      *out = as_string(*o);
      return true;
    };
    for (uint32_t i = 0; i < pl->via.map.size; ++i) {
      const msgpack::object_kv& kv = pl->via.map.ptr[i];
      std::string name;
      if (kv.key.type != msgpack::type::STR || kv.key.via.str.size > 65536)
        return bad("placement entry #" + std::to_string(i) + " has no name");
      name = as_string(kv.key);
      const std::string where = "the placement of '" + name.substr(0, 200) + "'";
      if (kv.val.type != msgpack::type::MAP) return bad(where + " is not a map");
      SavedPlacement sp;
      if (!str(map_get(kv.val, "place"), &sp.place)) return bad(where + " has no place");
      const msgpack::object* parts = map_get(kv.val, "parts");
      if (!parts || parts->type != msgpack::type::ARRAY) return bad(where + " has no parts array");
      if (parts->via.array.size > (1u << 20)) return bad(where + " lists more than 2^20 parts");
      int64_t next = 0;
      for (uint32_t k = 0; k < parts->via.array.size; ++k) {
        const msgpack::object& po = parts->via.array.ptr[k];
        SavedPart part;
        if (po.type != msgpack::type::MAP || !str(map_get(po, "variable"), &part.variable) ||
            !str(map_get(po, "place"), &part.place) || !map_get(po, "offset") || !map_get(po, "rows") ||
            !as_int64(*map_get(po, "offset"), &part.offset) || !as_int64(*map_get(po, "rows"), &part.rows) ||
            part.offset != next || part.rows < 0 || part.rows > (int64_t{1} << 40))
          return bad(where + ": part #" + std::to_string(k) + " is malformed or does not follow the one before");
        next = part.offset + part.rows;
        sp.parts.push_back(std::move(part));
      }
      if (!data.placement.emplace(std::move(name), std::move(sp)).second) return bad("duplicate " + where);
    }
  }
  return data;
}

std::atomic<uint64_t> g_tmp_counter{0};

}  // namespace

const char* save_point_name(SavePoint p) {
  switch (p) {
    case SavePoint::kTmpCreated: return "tmp_created";
    case SavePoint::kPartiallyWritten: return "partially_written";
    case SavePoint::kWritten: return "written";
    case SavePoint::kSynced: return "synced";
    case SavePoint::kRenamed: return "renamed";
    case SavePoint::kDirSynced: return "dir_synced";
    case SavePoint::kIndexTmpWritten: return "index_tmp_written";
    case SavePoint::kIndexRenamed: return "index_renamed";
    case SavePoint::kIndexDirSynced: return "index_dir_synced";
    case SavePoint::kOldDeleted: return "old_deleted";
  }
  return "unknown";
}

Status write_checkpoint(const std::string& path, const CheckpointData& data, const SaveHook& hook) {
  for (const auto& [name, t] : data.variables) {
    if (name.empty()) return InvalidArgument("write_checkpoint(" + path + "): a variable has an empty name");
    if (!t.is_initialized() || !t.on_host())
      return InvalidArgument("write_checkpoint(" + path + "): variable '" + name + "' (" + t.debug_string() +
                             ") is not an initialised host tensor");
    if (t.bytes() > UINT32_MAX)
      return InvalidArgument("write_checkpoint(" + path + "): variable '" + name + "' has " +
                             std::to_string(t.bytes()) + " bytes; at most 4 GiB per variable");
    if (name.size() > UINT32_MAX) return InvalidArgument("write_checkpoint(" + path + "): variable name too long");
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter++);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return Unavailable("cannot create checkpoint temporary " + tmp + ": " + errno_text(errno));
  auto fail = [&](Status st) {
    fd.reset();
    ::unlink(tmp.c_str());
    return st;
  };
  run_hook(hook, SavePoint::kTmpCreated);

  CrcFileStream out(fd.get(), tmp);
  msgpack::packer<CrcFileStream> pk(out);
  pk.pack_map(data.placement.empty() ? 4 : 5);
  pack_string(pk, "format");
  pack_string(pk, kCheckpointFormat);
  pack_string(pk, "version");
  pk.pack_int(kCheckpointVersion);
  pack_string(pk, "global_step");
  pk.pack_int64(data.global_step);
  pack_string(pk, "variables");
  pk.pack_array(static_cast<uint32_t>(data.variables.size()));
  bool first = true;
  for (const auto& [name, t] : data.variables) {
    pk.pack_map(4);
    pack_string(pk, "name");
    pack_string(pk, name);
    pack_string(pk, "dtype");
    pack_string(pk, dtype_name(t.dtype()));
    pack_string(pk, "shape");
    pk.pack_array(static_cast<uint32_t>(t.shape().rank()));
    for (int64_t d : t.shape().dims()) pk.pack_int64(d);
    pack_string(pk, "data");
    pk.pack_bin(static_cast<uint32_t>(t.bytes()));
    pk.pack_bin_body(static_cast<const char*>(t.raw_data()), static_cast<uint32_t>(t.bytes()));
    if (first) {
      first = false;
      out.flush();
      if (!out.status().ok()) return fail(out.status());
      run_hook(hook, SavePoint::kPartiallyWritten);
    }
  }
  if (!data.placement.empty()) {
    pack_string(pk, "placement");
    pk.pack_map(static_cast<uint32_t>(data.placement.size()));
    for (const auto& [name, sp] : data.placement) {
      pack_string(pk, name);
      pk.pack_map(2);
      pack_string(pk, "place");
      pack_string(pk, sp.place);
      pack_string(pk, "parts");
      pk.pack_array(static_cast<uint32_t>(sp.parts.size()));
      for (const SavedPart& part : sp.parts) {
        pk.pack_map(4);
        pack_string(pk, "variable");
        pack_string(pk, part.variable);
        pack_string(pk, "offset");
        pk.pack_int64(part.offset);
        pack_string(pk, "rows");
        pk.pack_int64(part.rows);
        pack_string(pk, "place");
        pack_string(pk, part.place);
      }
    }
  }
  out.flush();
  if (!out.status().ok()) return fail(out.status());
  if (first) run_hook(hook, SavePoint::kPartiallyWritten);  // no variables: the header is the first part
  const uint32_t crc = out.crc();
  const char trailer[kTrailerBytes] = {static_cast<char>(0xce), static_cast<char>(crc >> 24),
                                       static_cast<char>(crc >> 16), static_cast<char>(crc >> 8),
                                       static_cast<char>(crc)};
  Status st = write_all(fd.get(), trailer, kTrailerBytes, tmp);
  if (!st.ok()) return fail(st);
  run_hook(hook, SavePoint::kWritten);
  if (::fsync(fd.get()) != 0) return fail(Unavailable("fsync of " + tmp + " failed: " + errno_text(errno)));
  if (fd.reset() != 0) return fail(Unavailable("close of " + tmp + " failed: " + errno_text(errno)));
  run_hook(hook, SavePoint::kSynced);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail(Unavailable("cannot rename " + tmp + " to " + path + ": " + errno_text(errno)));
  run_hook(hook, SavePoint::kRenamed);
  AF_RETURN_IF_ERROR(fsync_dir(dir_of(path)));
  run_hook(hook, SavePoint::kDirSynced);
  return Status::OK();
}

Result<CheckpointData> read_checkpoint(const std::string& path) {
  std::string bytes;
  AF_RETURN_IF_ERROR(read_file(path, &bytes));
  return decode_checkpoint(bytes, path);
}

Result<CheckpointData> decode_checkpoint(const std::string& bytes, const std::string& path) {
  if (bytes.size() < kTrailerBytes + 1)
    return DataLoss("checkpoint " + path + " is truncated: " + std::to_string(bytes.size()) + " bytes");
  const size_t body = bytes.size() - kTrailerBytes;
  const auto* t = reinterpret_cast<const unsigned char*>(bytes.data() + body);
  if (t[0] != 0xce)
    return DataLoss("checkpoint " + path + " is truncated or corrupt: no checksum trailer at its end (" +
                    std::to_string(bytes.size()) + " bytes)");
  const uint32_t stored = static_cast<uint32_t>(t[1]) << 24 | static_cast<uint32_t>(t[2]) << 16 |
                          static_cast<uint32_t>(t[3]) << 8 | static_cast<uint32_t>(t[4]);
  const uint32_t actual = crc32c(bytes.data(), body);
  if (stored != actual) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "crc32c mismatch (stored %08x, computed %08x over %zu bytes)", stored, actual, body);
    return DataLoss("checkpoint " + path + " is corrupt or truncated: " + msg);
  }
  try {
    size_t off = 0;
    // Limits from the input: no array, map, string or bin can hold more entries or bytes than the
    // body has, and nesting is shallow (the format's is 4).
    const size_t n = body;
    const msgpack::unpack_limit limits(n, n, n, n, n, 16);
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), body, off, reference_bin, nullptr, limits);
    if (off != body)
      return DataLoss("checkpoint " + path + " is malformed: " + std::to_string(body - off) +
                      " stray bytes between the body and the checksum");
    return decode_body(path, oh.get());
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory reading checkpoint " + path);
  } catch (const std::exception& e) {
    return DataLoss("checkpoint " + path + " is malformed (checksum matched): " + e.what());
  }
}

// ---- CheckpointManager ------------------------------------------------------------------

CheckpointManager::CheckpointManager(std::string dir, int keep, std::string prefix, CheckpointFormat format)
    : dir_(std::move(dir)), keep_(keep), prefix_(std::move(prefix)), format_(format) {}

std::string CheckpointManager::index_path() const { return join_path(dir_, kIndexName); }

std::string CheckpointManager::path_for_step(int64_t global_step) const {
  return join_path(dir_, prefix_ + "-" + std::to_string(global_step));
}

std::optional<int64_t> checkpoint_step_from_path(const std::string& path, const std::string& prefix) {
  std::string name = base_of(path);
  const std::string tf_index = ".index";
  if (name.size() > tf_index.size() && name.compare(name.size() - tf_index.size(), tf_index.size(), tf_index) == 0)
    name.resize(name.size() - tf_index.size());
  const std::string head = prefix + "-";
  if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0) return std::nullopt;
  const std::string digits = name.substr(head.size());
  if (digits.size() > 18) return std::nullopt;
  for (char c : digits)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoll(digits);
}

std::optional<std::vector<int64_t>> CheckpointManager::read_index(std::string* why) const {
  std::string text;
  Status st = read_file(index_path(), &text);
  if (!st.ok()) {
    *why = st.code() == Code::kNotFound ? "missing" : st.to_string();
    return std::nullopt;
  }
  std::vector<int64_t> steps;
  std::optional<int64_t> latest;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const size_t colon = line.find(": \"");
    if (colon == std::string::npos || line.back() != '"') {
      *why = "line " + std::to_string(lineno) + " is not 'key: \"value\"'";
      return std::nullopt;
    }
    const std::string key = line.substr(0, colon);
    const std::string value = line.substr(colon + 3, line.size() - colon - 4);
    auto step = checkpoint_step_from_path(value, prefix_);
    if (!step || value.find('/') != std::string::npos) {
      *why = "line " + std::to_string(lineno) + " names '" + value + "', not a " + prefix_ + "-<step> file";
      return std::nullopt;
    }
    if (key == "model_checkpoint_path") latest = *step;
    else if (key == "all_model_checkpoint_paths") steps.push_back(*step);
    else {
      *why = "line " + std::to_string(lineno) + " has unknown key '" + key + "'";
      return std::nullopt;
    }
  }
  if (!latest) {
    *why = "no model_checkpoint_path line";
    return std::nullopt;
  }
  if (std::find(steps.begin(), steps.end(), *latest) == steps.end()) steps.push_back(*latest);
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

std::vector<int64_t> CheckpointManager::scan_dir() const {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return steps;
  while (dirent* e = ::readdir(d)) {
    if (auto step = checkpoint_step_from_path(e->d_name, prefix_)) steps.push_back(*step);
  }
  ::closedir(d);
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());  // a step in both formats
  return steps;
}

namespace {

// Deletes the checkpoint of `path` in either format: the file, or a TensorFlow bundle's index and
// data files. Failures other than ENOENT are logged.
void remove_checkpoint_files(const std::string& path) {
  std::vector<std::string> doomed{path, path + ".index"};
  const std::string data_head = base_of(path) + ".data-";
  if (DIR* d = ::opendir(dir_of(path).c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, data_head.size(), data_head) == 0 && name.find(".tmp.") == std::string::npos)
        doomed.push_back(join_path(dir_of(path), name));
    }
    ::closedir(d);
  }
  // The index first: a bundle without it is no checkpoint, one without data would be a bad one.
  std::swap(doomed[0], doomed[1]);
  for (const std::string& p : doomed)
    if (::unlink(p.c_str()) != 0 && errno != ENOENT)
      AF_LOG(WARNING) << "cannot delete old checkpoint file " << p << ": " << errno_text(errno);
}

}  // namespace

void CheckpointManager::remove_stale_temporaries() const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  std::vector<std::string> doomed;
  const std::string data_head = prefix_ + "-";
  const std::string index_head = std::string(kIndexName) + ".tmp.";
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool data_tmp = name.compare(0, data_head.size(), data_head) == 0 && name.find(".tmp.") != std::string::npos;
    const bool index_tmp = name.compare(0, index_head.size(), index_head) == 0;
    if (data_tmp || index_tmp) doomed.push_back(join_path(dir_, name));
  }
  ::closedir(d);
  for (const std::string& p : doomed) {
    AF_LOG(INFO) << "removing " << p << ", left by an interrupted checkpoint save";
    ::unlink(p.c_str());
  }
}

Status CheckpointManager::write_index(const std::vector<int64_t>& steps) {
  std::string text = "model_checkpoint_path: \"" + prefix_ + "-" + std::to_string(steps.front()) + "\"\n";
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    text += "all_model_checkpoint_paths: \"" + prefix_ + "-" + std::to_string(*it) + "\"\n";
  const std::string path = index_path();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter++);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return Unavailable("cannot create checkpoint index temporary " + tmp + ": " + errno_text(errno));
  Status st = write_all(fd.get(), text.data(), text.size(), tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = Unavailable("fsync of " + tmp + " failed: " + errno_text(errno));
  if (fd.reset() != 0 && st.ok()) st = Unavailable("close of " + tmp + " failed: " + errno_text(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  run_hook(hook_, SavePoint::kIndexTmpWritten);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Unavailable("cannot rename " + tmp + " to " + path + ": " + errno_text(errno));
    ::unlink(tmp.c_str());
    return st;
  }
  run_hook(hook_, SavePoint::kIndexRenamed);
  AF_RETURN_IF_ERROR(fsync_dir(dir_));
  run_hook(hook_, SavePoint::kIndexDirSynced);
  return Status::OK();
}

Result<std::string> CheckpointManager::save(const CheckpointData& data) {
  if (data.global_step < 0)
    return InvalidArgument("CheckpointManager::save: negative global_step " + std::to_string(data.global_step));
  AF_RETURN_IF_ERROR(make_dirs(dir_));
  remove_stale_temporaries();
  const int64_t step = data.global_step;
  const std::string path = path_for_step(step);
  if (format_ == CheckpointFormat::kTensorFlow) {
    TfSaveOptions tf_opts;
    tf_opts.sharded = tf_sharded_;
    AF_RETURN_IF_ERROR(write_checkpoint_data_as_tf(path, data, tf_opts));
    run_hook(hook_, SavePoint::kDirSynced);
  } else {
    AF_RETURN_IF_ERROR(write_checkpoint(path, data, hook_));
  }

  // Everything this prefix has: the index's entries and whatever files exist.
  std::string why;
  std::set<int64_t> known;
  if (auto idx = read_index(&why)) known.insert(idx->begin(), idx->end());
  for (int64_t s : scan_dir()) known.insert(s);
  std::vector<int64_t> kept{step};
  for (auto it = known.rbegin(); it != known.rend(); ++it) {
    if (*it >= step) continue;
    if (keep_ > 0 && kept.size() >= static_cast<size_t>(keep_)) break;
    kept.push_back(*it);
  }
  AF_RETURN_IF_ERROR(write_index(kept));

  // The index no longer names anything else: delete the rest, oldest first.
  for (int64_t s : known) {
    if (std::find(kept.begin(), kept.end(), s) != kept.end()) continue;
    const std::string doomed = path_for_step(s);
    if (s > step) {
      AF_LOG(WARNING) << "deleting checkpoint " << doomed << ": its step is above the one just saved (" << step
                      << "), so it belongs to an abandoned run";
    }
    remove_checkpoint_files(doomed);
    run_hook(hook_, SavePoint::kOldDeleted);
  }
  return path;
}

std::vector<std::string> CheckpointManager::list() const {
  std::string why;
  std::vector<int64_t> steps;
  if (auto idx = read_index(&why)) steps = std::move(*idx);
  else steps = scan_dir();
  std::vector<std::string> out;
  for (int64_t s : steps) out.push_back(path_for_step(s));
  return out;
}

Result<std::optional<CheckpointData>> CheckpointManager::restore_latest() {
  skipped_.clear();
  restored_path_.clear();
  std::string why;
  std::set<int64_t> candidates;
  auto idx = read_index(&why);
  if (idx) {
    candidates.insert(idx->begin(), idx->end());
  } else if (why != "missing") {
    AF_LOG(WARNING) << "checkpoint index " << index_path() << " is unreadable (" << why
                    << "); looking for checkpoint files in " << dir_ << " instead";
  }
  for (int64_t s : scan_dir()) candidates.insert(s);
  if (candidates.empty()) return std::optional<CheckpointData>();
  std::string problems;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const std::string path = path_for_step(*it);
    const bool tf = is_tf_checkpoint(path);
    Result<CheckpointData> r = tf ? read_tf_checkpoint_data(path) : read_checkpoint(path);
    // A TensorFlow checkpoint without a global_step variable has its step in its name only.
    if (r.ok() && tf && r->variables.count("global_step") == 0) r->global_step = *it;
    if (r.ok()) {
      if (!skipped_.empty()) {
        AF_LOG(WARNING) << "restored the older checkpoint " << path << " after skipping " << skipped_.size()
                        << " unreadable newer one(s)";
      }
      restored_path_ = path;
      return std::optional<CheckpointData>(std::move(r).value());
    }
    AF_LOG(WARNING) << "checkpoint " << path << " is unreadable (" << r.status().to_string()
                    << "); trying the previous one";
    skipped_.push_back({path, r.status()});
    problems += "\n  " + path + ": " + r.status().to_string();
  }
  return DataLoss("no readable checkpoint in " + dir_ + ":" + problems);
}

Result<std::string> corrupt_latest(const std::string& dir, CorruptMode mode, const std::string& prefix) {
  int64_t best = -1;
  std::string path;
  // The newest of the index's entries and the files present (what restore_latest tries first).
  DIR* d = ::opendir(dir.c_str());
  if (d) {
    while (dirent* e = ::readdir(d)) {
      if (auto s = checkpoint_step_from_path(e->d_name, prefix); s && *s > best) {
        best = *s;
        path = join_path(dir, e->d_name);
      }
    }
    ::closedir(d);
  }
  if (path.empty()) return NotFound("no checkpoint " + prefix + "-<step> in " + dir + " to corrupt");
  // A TensorFlow bundle is damaged through its index (its blocks are CRC-checked).
  const std::string tf_index = ".index";
  if (path.size() <= tf_index.size() || path.compare(path.size() - tf_index.size(), tf_index.size(), tf_index) != 0) {
    struct stat ist {};
    if (::stat((path + tf_index).c_str(), &ist) == 0) path += tf_index;
  }
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return Unavailable("cannot open " + path + ": " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Unavailable("cannot stat " + path + ": " + errno_text(errno));
  const off_t size = st.st_size;
  int rc = 0;
  switch (mode) {
    case CorruptMode::kFlipByte: {
      if (size == 0) break;
      unsigned char b = 0;
      const off_t at = size / 2;
      if (::pread(fd.get(), &b, 1, at) != 1) return Unavailable("cannot read " + path);
      b ^= 0xFF;
      if (::pwrite(fd.get(), &b, 1, at) != 1) return Unavailable("cannot write " + path);
      break;
    }
    case CorruptMode::kTruncateHalf: rc = ::ftruncate(fd.get(), size / 2); break;
    case CorruptMode::kDropLastByte: rc = ::ftruncate(fd.get(), size > 0 ? size - 1 : 0); break;
    case CorruptMode::kZeroLength: rc = ::ftruncate(fd.get(), 0); break;
  }
  if (rc != 0) return Unavailable("cannot truncate " + path + ": " + errno_text(errno));
  ::fsync(fd.get());
  AF_LOG(WARNING) << "fault injection: corrupted checkpoint " << path;
  return path;
}

}  // namespace actorflow
