#include "data/idx.h"

#include "core/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

namespace actorflow {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "idx.cc assumes a little-endian host");

constexpr uint64_t kMaxDataBytes = uint64_t{1} << 36;  // 64 GiB: anything larger is a corrupt header

std::string errno_text(int e) { return std::strerror(e); }

// A read-only byte source over a plain or gzip file. Owns its descriptor / gzFile. Not copyable.
class ByteSource {
 public:
  ByteSource() = default;
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;
  ~ByteSource() {
    if (gz_) gzclose(gz_);
    else if (fd_ >= 0) ::close(fd_);
  }

  // Opens `path`, detecting gzip from its first two bytes.
  Status open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);  // never waits on a FIFO
    if (fd_ < 0) {
      int e = errno;
      if (e == ENOENT) return NotFound("IDX file " + path + " does not exist");
      return Unavailable("cannot open IDX file " + path + ": " + errno_text(e));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return Unavailable("cannot stat IDX file " + path + ": " + errno_text(errno));
    if (!S_ISREG(st.st_mode))
      return InvalidArgument("IDX file " + path + " is " + file_kind(st.st_mode) + ", not a regular file");
    file_size_ = static_cast<uint64_t>(st.st_size);
    unsigned char magic[2] = {0, 0};
    ssize_t got = ::pread(fd_, magic, 2, 0);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      gz_ = gzdopen(fd_, "rb");  // takes ownership of fd_
      if (!gz_) return Internal("zlib could not open " + path);
      gzbuffer(gz_, 1 << 17);
    }
    return Status::OK();
  }

  bool gzip() const { return gzip_; }
  uint64_t file_size() const { return file_size_; }
  const char* kind() const { return gzip_ ? "gzip IDX file" : "IDX file"; }

  // Reads up to `n` bytes into `buf`; returns the count, which is < n only at the end of the
  // (decompressed) data. DataLoss on I/O or decompression errors.
  Result<size_t> read(void* buf, size_t n) {
    auto* p = static_cast<char*>(buf);
    size_t total = 0;
    while (total < n) {
      size_t chunk = std::min<size_t>(n - total, size_t{1} << 30);
      if (gzip_) {
        int r = gzread(gz_, p + total, static_cast<unsigned>(chunk));
        if (r < 0) {
          int errnum = 0;
          const char* msg = gzerror(gz_, &errnum);
          return DataLoss(std::string("corrupt gzip data in ") + path_ + ": " + (msg ? msg : "unknown zlib error"));
        }
        if (r == 0) {
          int errnum = 0;
          const char* msg = gzerror(gz_, &errnum);
          if (errnum != Z_OK && errnum != Z_STREAM_END)
            return DataLoss(std::string("gzip data in ") + path_ + " is truncated or corrupt: " +
                            (msg ? msg : "unknown zlib error"));
          break;
        }
        total += static_cast<size_t>(r);
      } else {
        ssize_t r = ::read(fd_, p + total, chunk);
        if (r < 0) {
          if (errno == EINTR) continue;
          return DataLoss("read error in " + path_ + ": " + errno_text(errno));
        }
        if (r == 0) break;
        total += static_cast<size_t>(r);
      }
    }
    return total;
  }

 private:
  std::string path_;
  int fd_ = -1;
  gzFile gz_ = nullptr;
  bool gzip_ = false;
  uint64_t file_size_ = 0;
};

uint32_t load_be32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

// Maps an IDX type code to a dtype; kInvalid when unsupported.
DType dtype_for_idx_code(unsigned code) {
  switch (code) {
    case 0x08: return DType::kUInt8;
    case 0x0C: return DType::kInt32;
    case 0x0D: return DType::kFloat32;
    case 0x0E: return DType::kFloat64;
    default: return DType::kInvalid;
  }
}

unsigned idx_code_for_dtype(DType t) {
  switch (t) {
    case DType::kUInt8: return 0x08;
    case DType::kInt32: return 0x0C;
    case DType::kFloat32: return 0x0D;
    case DType::kFloat64: return 0x0E;
    default: return 0;
  }
}

const char* idx_type_name(unsigned code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return "unknown";
  }
}

// Swaps every element between big- and little-endian in place. `data` need not be aligned.
void byteswap_elements(void* data, size_t count, size_t elem_size) {
  auto* p = static_cast<unsigned char*>(data);
  if (elem_size == 4) {
    for (size_t i = 0; i < count; ++i, p += 4) {
      uint32_t v;
      std::memcpy(&v, p, 4);
      v = __builtin_bswap32(v);
      std::memcpy(p, &v, 4);
    }
  } else if (elem_size == 8) {
    for (size_t i = 0; i < count; ++i, p += 8) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      v = __builtin_bswap64(v);
      std::memcpy(p, &v, 8);
    }
  }
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Finds `name` or `name.gz` in `dir`.
Result<std::string> find_mnist_file(const std::string& dir, const std::string& name) {
  std::string plain = join_path(dir, name);
  if (file_exists(plain)) return plain;
  if (file_exists(plain + ".gz")) return plain + ".gz";
  return NotFound("MNIST file " + name + " not found in " + dir + " (tried " + plain + " and " + plain + ".gz)");
}

struct Split {
  Tensor images;
  Tensor labels;
};

Result<Split> load_split(const std::string& dir, const std::string& prefix) {
  AF_ASSIGN_OR_RETURN(std::string img_path, find_mnist_file(dir, prefix + "-images-idx3-ubyte"));
  AF_ASSIGN_OR_RETURN(std::string lbl_path, find_mnist_file(dir, prefix + "-labels-idx1-ubyte"));
  AF_ASSIGN_OR_RETURN(Tensor img, read_idx(img_path));
  if (img.dtype() != DType::kUInt8 || img.shape().rank() != 3)
    return InvalidArgument("MNIST image file " + img_path + " holds " + dtype_name(img.dtype()) + " " +
                           img.shape().to_string() + "; expected uint8 [N,rows,cols]");
  AF_ASSIGN_OR_RETURN(Tensor lbl, read_idx(lbl_path));
  if (lbl.dtype() != DType::kUInt8 || lbl.shape().rank() != 1)
    return InvalidArgument("MNIST label file " + lbl_path + " holds " + dtype_name(lbl.dtype()) + " " +
                           lbl.shape().to_string() + "; expected uint8 [N]");
  if (img.shape().dim(0) != lbl.shape().dim(0))
    return InvalidArgument("count mismatch: " + img_path + " has " + std::to_string(img.shape().dim(0)) +
                           " images but " + lbl_path + " has " + std::to_string(lbl.shape().dim(0)) + " labels");
  Split s;
  AF_ASSIGN_OR_RETURN(s.images, images_to_float(img));
  AF_ASSIGN_OR_RETURN(s.labels, Tensor::allocate(cpu_allocator(), DType::kInt32, lbl.shape()));
  const uint8_t* src = lbl.data<uint8_t>();
  int32_t* dst = s.labels.data<int32_t>();
  for (int64_t i = 0; i < lbl.num_elements(); ++i) dst[i] = src[i];
  return s;
}

}  // namespace

Result<Tensor> read_idx(const std::string& path) {
  ByteSource src;
  AF_RETURN_IF_ERROR(src.open(path));
  unsigned char magic[4];
  AF_ASSIGN_OR_RETURN(size_t got, src.read(magic, 4));
  if (got < 4)
    return InvalidArgument(std::string(src.kind()) + " " + path + " is too short for an IDX header (" +
                           std::to_string(got) + " bytes)");
  if (magic[0] != 0 || magic[1] != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    return InvalidArgument(std::string(src.kind()) + " " + path + " has bad magic " + hex +
                           " (an IDX file starts with 00 00 <type> <rank>)");
  }
  const unsigned code = magic[2];
  const unsigned rank = magic[3];
  const DType dtype = dtype_for_idx_code(code);
  if (dtype == DType::kInvalid) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", code);
    return InvalidArgument("IDX file " + path + " has element type " + hex + " (" + idx_type_name(code) +
                           "), which is not supported; supported: 0x08 unsigned byte, 0x0C int, "
                           "0x0D float, 0x0E double");
  }
  std::vector<unsigned char> dimbuf(4 * rank);
  AF_ASSIGN_OR_RETURN(got, src.read(dimbuf.data(), dimbuf.size()));
  if (got < dimbuf.size())
    return DataLoss("IDX file " + path + " is truncated inside its header (rank " + std::to_string(rank) +
                    " needs " + std::to_string(dimbuf.size()) + " dimension bytes, found " + std::to_string(got) + ")");
  std::vector<int64_t> dims(rank);
  uint64_t elems = 1;
  for (unsigned i = 0; i < rank; ++i) {
    dims[i] = load_be32(&dimbuf[4 * i]);
    if (dims[i] != 0 && elems > kMaxDataBytes / static_cast<uint64_t>(dims[i])) {
      elems = kMaxDataBytes + 1;
      break;
    }
    elems *= static_cast<uint64_t>(dims[i]);
  }
  const Shape shape{std::vector<int64_t>(dims)};
  const uint64_t data_bytes = elems * dtype_size(dtype);
  if (elems > kMaxDataBytes || data_bytes > kMaxDataBytes)
    return InvalidArgument("IDX file " + path + " declares dimensions " + shape.to_string() +
                           " whose size exceeds the 64 GiB limit (corrupt header?)");
  const uint64_t header_bytes = 4 + 4 * uint64_t{rank};
  // DEFLATE expands at most about 1032:1, so a small gzip file cannot hold a huge declared
  // tensor: refuse before allocating it.
  if (src.gzip() && data_bytes / 1032 > src.file_size() + 1024)
    return DataLoss("gzip IDX file " + path + " declares " + dtype_name(dtype) + " " + shape.to_string() + " (" +
                    std::to_string(data_bytes) + " data bytes), more than its " + std::to_string(src.file_size()) +
                    " compressed bytes can hold");
  if (!src.gzip() && src.file_size() < header_bytes + data_bytes)
    return DataLoss("IDX file " + path + " is truncated: header declares " + dtype_name(dtype) + " " +
                    shape.to_string() + " (" + std::to_string(data_bytes) + " data bytes) but the file has only " +
                    std::to_string(src.file_size() - header_bytes) + " data bytes");
  AF_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(cpu_allocator(), dtype, shape));
  AF_ASSIGN_OR_RETURN(got, src.read(t.raw_data(), static_cast<size_t>(data_bytes)));
  if (got < data_bytes)
    return DataLoss(std::string(src.kind()) + " " + path + " is truncated: header declares " + dtype_name(dtype) +
                    " " + shape.to_string() + " (" + std::to_string(data_bytes) + " data bytes) but only " +
                    std::to_string(got) + " follow");
  char extra;
  AF_ASSIGN_OR_RETURN(got, src.read(&extra, 1));  // also makes zlib verify the gzip trailer's CRC
  if (got != 0)
    return DataLoss(std::string(src.kind()) + " " + path + " has trailing bytes after the " +
                    std::to_string(data_bytes) + " data bytes its header " + shape.to_string() + " declares");
  byteswap_elements(t.raw_data(), static_cast<size_t>(elems), dtype_size(dtype));
  return t;
}

Status write_idx(const std::string& path, const Tensor& t, bool gzip) {
  const unsigned code = idx_code_for_dtype(t.dtype());
  if (code == 0)
    return InvalidArgument(std::string("write_idx(") + path + "): dtype " + dtype_name(t.dtype()) +
                           " has no IDX type code");
  if (t.shape().rank() > 255)
    return InvalidArgument("write_idx(" + path + "): rank " + std::to_string(t.shape().rank()) + " exceeds 255");
  std::vector<unsigned char> out;
  out.reserve(4 + 4 * t.shape().rank() + t.bytes());
  out.push_back(0);
  out.push_back(0);
  out.push_back(static_cast<unsigned char>(code));
  out.push_back(static_cast<unsigned char>(t.shape().rank()));
  for (int64_t d : t.shape().dims()) {
    if (d < 0 || d > UINT32_MAX)
      return InvalidArgument("write_idx(" + path + "): dimension " + std::to_string(d) + " does not fit IDX");
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>((static_cast<uint64_t>(d) >> s) & 0xFF));
  }
  const size_t hdr = out.size();
  out.resize(hdr + t.bytes());
  if (t.bytes()) std::memcpy(out.data() + hdr, t.raw_data(), t.bytes());
  byteswap_elements(out.data() + hdr, static_cast<size_t>(t.num_elements()), dtype_size(t.dtype()));
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) return Unavailable("cannot create " + path + ": " + errno_text(errno));
    size_t off = 0;
    bool ok = true;
    while (off < out.size() && ok) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(out.size() - off, size_t{1} << 30));
      ok = gzwrite(f, out.data() + off, chunk) == static_cast<int>(chunk);
      off += chunk;
    }
    if (gzclose(f) != Z_OK || !ok) return Unavailable("cannot write gzip IDX file " + path);
    return Status::OK();
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Unavailable("cannot create " + path + ": " + errno_text(errno));
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) return Unavailable("cannot write IDX file " + path);
  return Status::OK();
}

Result<Tensor> images_to_float(const Tensor& images) {
  if (images.dtype() != DType::kUInt8 || images.shape().rank() < 1)
    return InvalidArgument(std::string("images_to_float expects uint8 images [N,...], got ") + images.debug_string());
  const int64_t n = images.shape().dim(0);
  int64_t row_elems = 1;
  for (int i = 1; i < images.shape().rank(); ++i) row_elems *= images.shape().dim(i);
  AF_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(cpu_allocator(), DType::kFloat32, Shape{n, row_elems}));
  const uint8_t* src = images.data<uint8_t>();
  float* dst = out.data<float>();
  const int64_t total = n * row_elems;
  for (int64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i]) / 255.f;
  return out;
}

Result<Tensor> to_categorical(const Tensor& labels, int depth) {
  if (labels.shape().rank() != 1 ||
      (labels.dtype() != DType::kUInt8 && labels.dtype() != DType::kInt32 && labels.dtype() != DType::kInt64))
    return InvalidArgument(std::string("to_categorical expects integer labels [N], got ") + labels.debug_string());
  if (depth <= 0) return InvalidArgument("to_categorical: num_classes must be positive, got " + std::to_string(depth));
  const int64_t n = labels.shape().dim(0);
  Tensor out(DType::kFloat32, Shape{n, depth});  // zero-filled
  float* dst = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = labels.dtype() == DType::kUInt8   ? labels.data<uint8_t>()[i]
                : labels.dtype() == DType::kInt32 ? labels.data<int32_t>()[i]
                                                  : labels.data<int64_t>()[i];
    if (v < 0 || v >= depth)
      return InvalidArgument("to_categorical: label " + std::to_string(v) + " at index " + std::to_string(i) +
                             " is outside [0, " + std::to_string(depth) + ")");
    dst[i * depth + v] = 1.f;
  }
  return out;
}

Result<MnistData> load_mnist(const std::string& dir) {
  MnistData d;
  AF_ASSIGN_OR_RETURN(Split train, load_split(dir, "train"));
  AF_ASSIGN_OR_RETURN(Split test, load_split(dir, "t10k"));
  d.train_images = std::move(train.images);
  d.train_labels = std::move(train.labels);
  d.test_images = std::move(test.images);
  d.test_labels = std::move(test.labels);
  return d;
}

}  // namespace actorflow
