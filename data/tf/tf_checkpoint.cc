#include "data/tf/tf_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <leveldb/env.h>
#include <leveldb/options.h>
#include <leveldb/table_builder.h>

#include "core/checked_math.h"
#include "core/file_read.h"
#include "data/crc32c.h"
#include "proto/tf/checkpoint_state.pb.h"
#include "proto/tf/tensor_bundle.pb.h"

namespace actorflow {

// ---------------------------------------------------------------------------------------------
// dtypes and element conversions

size_t tf_dtype_size(TfDType t) {
  switch (t) {
    case TfDType::kFloat:
    case TfDType::kInt32:
      return 4;
    case TfDType::kDouble:
    case TfDType::kInt64:
      return 8;
    case TfDType::kBool:
      return 1;
    case TfDType::kBFloat16:
    case TfDType::kHalf:
      return 2;
  }
  return 0;
}

const char* tf_dtype_name(TfDType t) {
  switch (t) {
    case TfDType::kFloat:
      return "float32";
    case TfDType::kDouble:
      return "float64";
    case TfDType::kInt32:
      return "int32";
    case TfDType::kInt64:
      return "int64";
    case TfDType::kBool:
      return "bool";
    case TfDType::kBFloat16:
      return "bfloat16";
    case TfDType::kHalf:
      return "float16";
  }
  return "invalid";
}

Result<TfDType> tf_dtype_from_enum(int value) {
  switch (value) {
    case 1:
    case 2:
    case 3:
    case 9:
    case 10:
    case 14:
    case 19:
      return static_cast<TfDType>(value);
    default:
      break;
  }
  std::string name =
      tf::DataType_IsValid(value) ? tf::DataType_Name(static_cast<tf::DataType>(value)) : std::to_string(value);
  return Unimplemented("dtype " + name +
                       " is not supported (float32, float64, float16, bfloat16, "
                       "int32, int64, bool are)");
}

namespace {

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x33000001u) return sign;                                    // rounds to 0
  uint32_t exp = ax >> 23;
  uint32_t man = (ax & 0x7fffffu) | 0x800000u;
  int shift = exp >= 113 ? 13 : static_cast<int>(126 - exp);  // normal : subnormal
  uint32_t base = exp >= 113 ? ((exp - 112) << 10) : 0;
  uint32_t m = exp >= 113 ? (ax & 0x7fffffu) : man;
  uint32_t half = m >> shift, rest = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
  uint32_t r = base + half;
  if (rest > mid || (rest == mid && (half & 1u))) ++r;  // carries into the exponent correctly
  return static_cast<uint16_t>(sign | r);
}


uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

}  // namespace

Result<TfTensor> tf_tensor_from(const Tensor& t) {
  if (!t.is_initialized()) return InvalidArgument("tf_tensor_from: tensor is not initialised");
  TfTensor out;
  switch (t.dtype()) {
    case DType::kFloat32:
      out.dtype = TfDType::kFloat;
      break;
    case DType::kFloat64:
      out.dtype = TfDType::kDouble;
      break;
    case DType::kInt32:
      out.dtype = TfDType::kInt32;
      break;
    case DType::kInt64:
      out.dtype = TfDType::kInt64;
      break;
    case DType::kBool:
      out.dtype = TfDType::kBool;
      break;
    default:
      return InvalidArgument(std::string("tf_tensor_from: dtype ") + dtype_name(t.dtype()) +
                             " has no TensorFlow checkpoint encoding here");
  }
  out.shape = t.shape();
  out.bytes.assign(static_cast<const char*>(t.raw_data()), t.bytes());
  if (out.dtype == TfDType::kBool)
    for (char& c : out.bytes) c = c ? 1 : 0;
  return out;
}

namespace {
Status check_tf_tensor(const TfTensor& t, const std::string& what) {
  if (!t.shape.valid_for_tensor() || t.shape.unknown_rank())
    return InvalidArgument(what + ": shape " + t.shape.to_string() + " is not a valid tensor shape");
  size_t want;
  if (!checked_mul_size(static_cast<size_t>(t.shape.num_elements()), tf_dtype_size(t.dtype), &want) ||
      want != t.bytes.size())
    return InvalidArgument(what + ": " + std::to_string(t.bytes.size()) + " bytes for a " + tf_dtype_name(t.dtype) +
                           " tensor of shape " + t.shape.to_string());
  return Status::OK();
}
}  // namespace

Result<Tensor> tf_tensor_to_tensor(const TfTensor& t) {
  AF_RETURN_IF_ERROR(check_tf_tensor(t, "tf_tensor_to_tensor"));
  DType dt = DType::kFloat32;
  switch (t.dtype) {
    case TfDType::kDouble:
      dt = DType::kFloat64;
      break;
    case TfDType::kInt32:
      dt = DType::kInt32;
      break;
    case TfDType::kInt64:
      dt = DType::kInt64;
      break;
    case TfDType::kBool:
      dt = DType::kBool;
      break;
    default:
      break;
  }
  Tensor out(dt, t.shape);
  const int64_t n = t.shape.num_elements();
  if (t.dtype == TfDType::kHalf || t.dtype == TfDType::kBFloat16) {
    float* d = out.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, t.bytes.data() + 2 * i, 2);
      d[i] = t.dtype == TfDType::kHalf ? float16_bits_to_float(v) : bfloat16_bits_to_float(v);
    }
  } else if (!t.bytes.empty()) {
    std::memcpy(out.raw_data(), t.bytes.data(), t.bytes.size());
  }
  return out;
}

Result<TfTensor> tf_tensor_narrow(const Tensor& t, TfDType to) {
  if (!t.is_initialized() || t.dtype() != DType::kFloat32 || (to != TfDType::kHalf && to != TfDType::kBFloat16))
    return InvalidArgument("tf_tensor_narrow: needs a float32 tensor and float16 or bfloat16");
  TfTensor out;
  out.dtype = to;
  out.shape = t.shape();
  const int64_t n = t.num_elements();
  out.bytes.resize(static_cast<size_t>(n) * 2);
  const float* s = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v = to == TfDType::kHalf ? float_to_half(s[i]) : float_to_bf16(s[i]);
    std::memcpy(&out.bytes[static_cast<size_t>(2 * i)], &v, 2);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// TensorFlow's ordered code (the slice keys)

std::string tf_slice_key(const std::string& name, const std::vector<TfExtent>& extents) {
  std::string out;
  auto put_unsigned = [&out](uint64_t v) {  // length byte, then big-endian bytes without leading 0s
    unsigned char buf[8];
    int n = 0;
    for (; v != 0; v >>= 8) buf[n++] = static_cast<unsigned char>(v & 0xff);
    out.push_back(static_cast<char>(n));
    while (n > 0) out.push_back(static_cast<char>(buf[--n]));
  };
  auto put_signed = [&out](int64_t v) {
    uint64_t x = v < 0 ? ~static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    int bits = 0;  // significant bits of x
    while (bits < 64 && (x >> bits) != 0) ++bits;
    int len = bits / 7 + 1;  // n bytes hold values in [-2^(7n-1), 2^(7n-1))
    unsigned char buf[10];
    uint64_t u = static_cast<uint64_t>(v);
    unsigned char sign = v < 0 ? 0xff : 0x00;
    for (int i = 0; i < 10; ++i) buf[9 - i] = i < 8 ? static_cast<unsigned char>(u >> (8 * i)) : sign;
    unsigned char* begin = buf + 10 - len;
    // The header: len - 1 one-bits after the sign bit (all in the first byte up to len 8).
    static const unsigned char kHeader[11][2] = {{0, 0},    {0x80, 0}, {0xc0, 0}, {0xe0, 0},    {0xf0, 0},   {0xf8, 0},
                                                 {0xfc, 0}, {0xfe, 0}, {0xff, 0}, {0xff, 0x80}, {0xff, 0xc0}};
    begin[0] ^= kHeader[len][0];
    if (len > 1) begin[1] ^= kHeader[len][1];
    out.append(reinterpret_cast<const char*>(begin), static_cast<size_t>(len));
  };
  put_unsigned(0);
  for (char c : name) {
    if (c == '\0') {
      out.push_back('\0');
      out.push_back('\xff');
    } else if (c == '\xff') {
      out.push_back('\xff');
      out.push_back('\0');
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\0');
  out.push_back('\x01');
  put_unsigned(extents.size());
  for (const TfExtent& e : extents) {
    put_signed(e.length < 0 ? 0 : e.start);  // a full extent is (0, -1), as TensorSlice holds it
    put_signed(e.length);
  }
  return out;
}

Status tf_parse_slice_key(const std::string& key, std::string* name, std::vector<TfExtent>* extents) {
  size_t p = 0;
  auto bad = [&](const std::string& what) {
    return InvalidArgument("slice key: " + what + " at byte " + std::to_string(p));
  };
  auto get_unsigned = [&](uint64_t* v) -> bool {
    if (p >= key.size()) return false;
    size_t len = static_cast<unsigned char>(key[p]);
    if (len > 8 || key.size() - p - 1 < len) return false;
    uint64_t r = 0;
    for (size_t i = 0; i < len; ++i) r = (r << 8) | static_cast<unsigned char>(key[p + 1 + i]);
    p += len + 1;
    *v = r;
    return true;
  };
  auto get_signed = [&](int64_t* v) -> bool {
    if (p >= key.size()) return false;
    const unsigned char first = static_cast<unsigned char>(key[p]);
    const unsigned char flip = (first & 0x80) ? 0x00 : 0xff;  // negative numbers are complemented
    auto byte = [&](size_t i) { return static_cast<unsigned char>(static_cast<unsigned char>(key[p + i]) ^ flip); };
    // Length: 1 + the number of one-bits after the sign bit, over the first two bytes.
    int len = 1;
    unsigned char b0 = byte(0);
    for (int bit = 6; bit >= 0 && (b0 >> bit) & 1; --bit) ++len;
    if (len == 8) {  // the run may continue into the second byte
      if (key.size() - p < 2) return false;
      unsigned char b1 = byte(1);
      if (b1 & 0x80) {
        ++len;
        if (b1 & 0x40) {
          ++len;
          if (b1 & 0x20) return false;
        }
      }
    }
    if (key.size() - p < static_cast<size_t>(len)) return false;
    // Value: the bytes with the header bits cleared, sign-extended from the payload's top bit.
    uint64_t u = 0;
    for (int i = 0; i < len; ++i) u = (u << 8) | byte(static_cast<size_t>(i));
    const int payload_bits = len == 10 ? 64 : 7 * len - 1;
    if (payload_bits < 64) u &= (uint64_t{1} << payload_bits) - 1;
    int64_t r;
    if (flip) u = ~u;  // a negative number v was stored as ~v
    std::memcpy(&r, &u, 8);
    p += static_cast<size_t>(len);
    *v = r;
    return true;
  };
  uint64_t lead;
  if (!get_unsigned(&lead) || lead != 0) return bad("no leading 0");
  name->clear();
  for (;;) {
    if (p >= key.size()) return bad("unterminated name");
    char c = key[p++];
    if (c == '\0') {
      if (p >= key.size()) return bad("unterminated name");
      char d = key[p++];
      if (d == '\x01') break;
      if (d != '\xff') return bad("bad escape in name");
      name->push_back('\0');
    } else if (c == '\xff') {
      if (p >= key.size() || key[p++] != '\0') return bad("bad escape in name");
      name->push_back('\xff');
    } else {
      name->push_back(c);
    }
  }
  uint64_t rank;
  if (!get_unsigned(&rank) || rank == 0 || rank > static_cast<uint64_t>(kMaxTensorRank)) return bad("bad rank");
  extents->clear();
  for (uint64_t d = 0; d < rank; ++d) {
    TfExtent e;
    if (!get_signed(&e.start) || !get_signed(&e.length)) return bad("bad extent");
    if (e.length < 0) e.start = 0;
    extents->push_back(e);
  }
  if (p != key.size()) return bad("trailing bytes");
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// The index table (LevelDB's table format), parsed with every offset checked

namespace {

constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;
constexpr size_t kFooterSize = 48;
constexpr size_t kBlockTrailerSize = 5;
constexpr uint64_t kMaxIndexBytes = uint64_t{1} << 28;
// Prefix compression lets a small table spell long keys; the keys and values a table expands to
// may be at most this many times its size (plus kExpansionSlack): real indexes expand by about 2.
constexpr uint64_t kMaxExpansion = 8;
constexpr uint64_t kExpansionSlack = uint64_t{64} << 20;

bool get_varint64(const std::string& s, size_t* p, size_t end, uint64_t* v) {
  uint64_t r = 0;
  for (int shift = 0; shift <= 63 && *p < end; shift += 7) {
    uint64_t b = static_cast<unsigned char>(s[(*p)++]);
    r |= (b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

bool get_varint32(const std::string& s, size_t* p, size_t end, uint32_t* v) {
  uint64_t r;
  if (!get_varint64(s, p, end, &r) || r > 0xffffffffu) return false;
  *v = static_cast<uint32_t>(r);
  return true;
}

uint32_t load32(const std::string& s, size_t p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[p + static_cast<size_t>(i)]);
  return v;
}

struct Handle {
  uint64_t offset = 0, size = 0;
};

class TableParser {
 public:
  TableParser(const std::string& bytes, const std::string& file)
      : b_(bytes), file_(file), budget_(kMaxExpansion * bytes.size() + kExpansionSlack) {}

  Status parse(std::vector<std::pair<std::string, std::string>>* out) {
    if (b_.size() < kFooterSize)
      return err("is " + std::to_string(b_.size()) + " bytes, shorter than a table footer (48)");
    const size_t footer = b_.size() - kFooterSize;
    uint64_t magic = load32(b_, b_.size() - 8) | (static_cast<uint64_t>(load32(b_, b_.size() - 4)) << 32);
    if (magic != kTableMagic) return err("has no table magic number at its end (not a checkpoint index)");
    size_t p = footer;
    Handle meta, index;
    if (!get_handle(&p, footer + 40, &meta) || !get_handle(&p, footer + 40, &index))
      return err("footer: bad block handle");
    std::string index_block;
    AF_RETURN_IF_ERROR(read_block(index, footer, "index block", &index_block));
    std::string meta_block;
    AF_RETURN_IF_ERROR(read_block(meta, footer, "metaindex block", &meta_block));
    std::vector<std::pair<std::string, std::string>> index_entries;
    AF_RETURN_IF_ERROR(parse_block(index_block, "index block", &index_entries));
    for (const auto& ie : index_entries) {
      size_t q = 0;
      Handle h;
      if (!get_handle_from(ie.second, &q, &h) || q != ie.second.size())
        return err("index block: bad data block handle");
      std::string block;
      AF_RETURN_IF_ERROR(read_block(h, footer, "data block at offset " + std::to_string(h.offset), &block));
      AF_RETURN_IF_ERROR(parse_block(block, "data block at offset " + std::to_string(h.offset), out));
    }
    for (size_t i = 1; i < out->size(); ++i)
      if (!((*out)[i - 1].first < (*out)[i].first))
        return err("keys are not in strictly increasing order (at entry " + std::to_string(i) + ")");
    return Status::OK();
  }

 private:
  Status err(const std::string& what) const { return DataLoss("TensorFlow checkpoint index " + file_ + " " + what); }

  bool get_handle(size_t* p, size_t end, Handle* h) const {
    return get_varint64(b_, p, end, &h->offset) && get_varint64(b_, p, end, &h->size);
  }
  static bool get_handle_from(const std::string& s, size_t* p, Handle* h) {
    return get_varint64(s, p, s.size(), &h->offset) && get_varint64(s, p, s.size(), &h->size);
  }

  // The contents of the block at `h`, its trailer checked; blocks lie before the footer.
  Status read_block(const Handle& h, size_t limit, const std::string& what, std::string* out) const {
    uint64_t end;
    if (h.offset > limit || h.size > limit || !checked_add_size(h.offset, h.size, &end) || end > limit ||
        limit - end < kBlockTrailerSize)
      return err(what + ": block [" + std::to_string(h.offset) + ", +" + std::to_string(h.size) +
                 ") lies outside the file's " + std::to_string(limit) + " bytes before the footer");
    const char type = b_[end];
    if (type == 1)
      return Unimplemented("TensorFlow checkpoint index " + file_ + " " + what +
                           " is Snappy-compressed (not supported)");
    if (type != 0) return err(what + ": unknown block type " + std::to_string(static_cast<unsigned char>(type)));
    uint32_t crc = crc32c_extend(crc32c(b_.data() + h.offset, h.size), &type, 1);
    if (crc32c_masked(crc) != load32(b_, end + 1)) return err(what + ": CRC-32C mismatch");
    out->assign(b_, h.offset, h.size);
    return Status::OK();
  }

  Status parse_block(const std::string& blk, const std::string& what,
                     std::vector<std::pair<std::string, std::string>>* out) const {
    if (blk.size() < 4) return err(what + ": shorter than its restart count");
    const uint64_t restarts = load32(blk, blk.size() - 4);
    if (restarts == 0 || restarts > (blk.size() - 4) / 4)
      return err(what + ": bad restart count " + std::to_string(restarts));
    const size_t data_end = blk.size() - 4 - 4 * restarts;
    for (uint64_t i = 0; i < restarts; ++i)
      if (load32(blk, data_end + 4 * i) > data_end) return err(what + ": restart point past the entries");
    std::string key;
    size_t p = 0;
    while (p < data_end) {
      uint32_t shared, non_shared, value_len;
      if (!get_varint32(blk, &p, data_end, &shared) || !get_varint32(blk, &p, data_end, &non_shared) ||
          !get_varint32(blk, &p, data_end, &value_len))
        return err(what + ": bad entry header at byte " + std::to_string(p));
      if (shared > key.size()) return err(what + ": entry shares more of the previous key than it has");
      if (non_shared > data_end - p || value_len > data_end - p - non_shared)
        return err(what + ": entry at byte " + std::to_string(p) + " runs past the block");
      if (shared + uint64_t{non_shared} + value_len > budget_ - used_)
        return err("expands to more than " + std::to_string(budget_) + " bytes of keys and values (" +
                   std::to_string(kMaxExpansion) +
                   " times its size plus 64 MiB): prefix compression lying about its keys");
      used_ += shared + uint64_t{non_shared} + value_len;
      key.resize(shared);
      key.append(blk, p, non_shared);
      p += non_shared;
      out->emplace_back(key, blk.substr(p, value_len));
      p += value_len;
    }
    return Status::OK();
  }

  const std::string& b_;
  const std::string& file_;
  const uint64_t budget_;
  mutable uint64_t used_ = 0;
};

// A key for messages: printable ASCII as is, other bytes as \xNN, at most 100 bytes shown.
std::string printable_key(const std::string& key) {
  std::string out;
  for (size_t i = 0; i < key.size() && i < 100; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (key.size() > 100) out += "...(" + std::to_string(key.size()) + " bytes)";
  return out;
}

// A file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

std::string data_file_name(const std::string& prefix, int shard, int num_shards) {
  char buf[64];
  std::snprintf(buf, sizeof buf, ".data-%05d-of-%05d", shard, num_shards);
  return prefix + buf;
}

}  // namespace

struct TfCheckpointReader::RawEntry {
  TfDType dtype = TfDType::kFloat;
  Shape shape;
  int shard = 0;
  int64_t offset = 0, size = 0;
  uint32_t masked_crc = 0;
  std::vector<std::vector<TfExtent>> slices;
};

namespace {

// Checks and converts one BundleEntryProto. `rank_for_slices`: the slices' rank when partitioned.
Status convert_entry(const tf::BundleEntryProto& pe, int num_shards, const std::string& what,
                     TfCheckpointReader::RawEntry* e) {
  auto dt = tf_dtype_from_enum(pe.dtype());
  if (!dt.ok()) return Status(dt.status().code(), what + ": " + dt.status().message());
  e->dtype = *dt;
  if (pe.shape().unknown_rank()) return DataLoss(what + ": shape of unknown rank");
  if (pe.shape().dim_size() > kMaxTensorRank)
    return DataLoss(what + ": shape of rank " + std::to_string(pe.shape().dim_size()));
  std::vector<int64_t> dims;
  for (const auto& d : pe.shape().dim()) {
    if (d.size() < 0) return DataLoss(what + ": shape has dimension " + std::to_string(d.size()));
    dims.push_back(d.size());
  }
  e->shape = Shape(dims);
  if (!e->shape.valid_for_tensor())
    return DataLoss(what + ": shape " + e->shape.to_string() + " is not a valid tensor shape");
  for (const auto& ps : pe.slices()) {
    if (ps.extent_size() != e->shape.rank())
      return DataLoss(what + ": a slice has " + std::to_string(ps.extent_size()) + " extents for shape " +
                      e->shape.to_string());
    std::vector<TfExtent> ext;
    for (int d = 0; d < ps.extent_size(); ++d) {
      const auto& x = ps.extent(d);
      TfExtent t;
      t.start = x.start();
      t.length = x.has_length_case() == tf::TensorSliceProto::Extent::kLength ? x.length() : -1;
      int64_t end;
      if (t.length == -1) {
        if (t.start != 0) return DataLoss(what + ": full extent with start " + std::to_string(t.start));
      } else if (t.start < 0 || t.length < 0 || !checked_add(t.start, t.length, &end) || end > e->shape.dim(d)) {
        return DataLoss(what + ": slice extent [" + std::to_string(t.start) + ", +" + std::to_string(t.length) +
                        ") outside dimension " + std::to_string(d) + " of " + e->shape.to_string());
      }
      ext.push_back(t);
    }
    e->slices.push_back(std::move(ext));
  }
  if (!e->slices.empty()) {
    if (e->shape.rank() == 0) return DataLoss(what + ": a scalar cannot be partitioned");
    return Status::OK();
  }
  if (pe.shard_id() < 0 || pe.shard_id() >= num_shards)
    return DataLoss(what + ": shard " + std::to_string(pe.shard_id()) + " outside [0, " + std::to_string(num_shards) +
                    ")");
  if (pe.offset() < 0 || pe.size() < 0) return DataLoss(what + ": negative offset or size");
  int64_t want, end;
  if (!checked_mul(e->shape.num_elements(), static_cast<int64_t>(tf_dtype_size(e->dtype)), &want) || want != pe.size())
    return DataLoss(what + ": size " + std::to_string(pe.size()) + " bytes does not match a " +
                    tf_dtype_name(e->dtype) + " tensor of shape " + e->shape.to_string());
  if (!checked_add(pe.offset(), pe.size(), &end)) return DataLoss(what + ": offset + size overflows");
  e->shard = pe.shard_id();
  e->offset = pe.offset();
  e->size = pe.size();
  e->masked_crc = pe.crc32c();
  return Status::OK();
}

// The shape of a slice (full extents resolved against `full`).
Shape slice_shape(const Shape& full, const std::vector<TfExtent>& ext) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < ext.size(); ++d)
    dims.push_back(ext[d].length < 0 ? full.dim(static_cast<int>(d)) : ext[d].length);
  return Shape(dims);
}

// Calls f(dst_element, src_element, run) for each innermost run of the slice `ext` of `full`.
template <typename F>
void for_each_run(const Shape& full, const std::vector<TfExtent>& ext, F f) {
  const Shape ss = slice_shape(full, ext);
  const int r = full.rank();
  if (ss.num_elements() == 0) return;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  const int64_t run = ss.dim(r - 1);
  int64_t src = 0;
  for (;;) {
    int64_t dst = 0;
    for (int d = 0; d < r; ++d)
      dst = dst * full.dim(d) + (ext[static_cast<size_t>(d)].length < 0 ? 0 : ext[static_cast<size_t>(d)].start) +
            (d < r - 1 ? idx[static_cast<size_t>(d)] : 0);
    f(dst, src, run);
    src += run;
    int d = r - 2;
    for (; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < ss.dim(d)) break;
      idx[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

Result<TfCheckpointReader> TfCheckpointReader::open(const std::string& prefix) {
  auto bytes = read_regular_file(prefix + ".index", kMaxIndexBytes, "TensorFlow checkpoint index");
  if (!bytes.ok()) return bytes.status();
  return from_index(*bytes, prefix);
}

Result<TfCheckpointReader> TfCheckpointReader::from_index(const std::string& index, const std::string& prefix) {
  const std::string file = prefix + ".index";
  if (index.size() > kMaxIndexBytes)
    return ResourceExhausted("TensorFlow checkpoint index " + file + " is larger than 256 MiB");
  std::vector<std::pair<std::string, std::string>> kv;
  AF_RETURN_IF_ERROR(TableParser(index, file).parse(&kv));
  if (kv.empty() || !kv[0].first.empty())
    return DataLoss("TensorFlow checkpoint index " + file + " has no header entry");
  tf::BundleHeaderProto header;
  if (!header.ParseFromString(kv[0].second))
    return DataLoss("TensorFlow checkpoint index " + file + ": header does not parse");
  if (header.endianness() != tf::BundleHeaderProto::LITTLE)
    return Unimplemented("TensorFlow checkpoint " + file + " is big-endian (not supported)");
  if (header.version().min_consumer() > 1)
    return Unimplemented("TensorFlow checkpoint " + file + " needs bundle version " +
                         std::to_string(header.version().min_consumer()) + " (this reader understands 1)");
  for (int bad : header.version().bad_consumers())
    if (bad == 1) return Unimplemented("TensorFlow checkpoint " + file + " excludes bundle reader version 1");
  if (header.num_shards() < 1 || header.num_shards() > 100000)
    return DataLoss("TensorFlow checkpoint index " + file + ": num_shards " + std::to_string(header.num_shards()) +
                    " outside [1, 100000]");
  TfCheckpointReader r;
  r.prefix_ = prefix;
  r.num_shards_ = header.num_shards();
  for (size_t i = 1; i < kv.size(); ++i) {
    const std::string& key = kv[i].first;
    const bool slice_key = key[0] == '\0';
    std::string what = "TensorFlow checkpoint index " + file + ", entry " +
                       (slice_key ? "(slice key \"" + printable_key(key) + "\")" : "\"" + printable_key(key) + "\"");
    tf::BundleEntryProto pe;
    if (!pe.ParseFromString(kv[i].second)) return DataLoss(what + ": does not parse as a BundleEntryProto");
    auto e = std::make_shared<RawEntry>();
    AF_RETURN_IF_ERROR(convert_entry(pe, r.num_shards_, what, e.get()));
    if (slice_key && !e->slices.empty()) return DataLoss(what + ": a slice entry is itself partitioned");
    if (!slice_key) {
      TfEntryInfo info;
      info.name = key;
      info.dtype = e->dtype;
      info.shape = e->shape;
      info.slices = e->slices;
      r.entries_.push_back(std::move(info));
    }
    r.raw_[key] = std::move(e);
  }
  // Every slice a tensor lists has its own entry, of the same dtype and the slice's shape.
  for (const TfEntryInfo& info : r.entries_) {
    for (const auto& ext : info.slices) {
      const std::string what = "TensorFlow checkpoint index " + file + ", tensor \"" + printable_key(info.name) + "\"";
      auto it = r.raw_.find(tf_slice_key(info.name, ext));
      if (it == r.raw_.end()) return DataLoss(what + ": a listed slice has no entry");
      const Shape want = slice_shape(info.shape, ext);
      if (it->second->dtype != info.dtype || it->second->shape != want)
        return DataLoss(what + ": slice entry is " + tf_dtype_name(it->second->dtype) + " " +
                        it->second->shape.to_string() + ", expected " + tf_dtype_name(info.dtype) + " " +
                        want.to_string());
    }
  }
  return r;
}

Result<std::string> TfCheckpointReader::read_bytes(const RawEntry& e, const std::string& what) const {
  const std::string file = data_file_name(prefix_, e.shard, num_shards_);
  Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return DataLoss(what + ": cannot open data file " + file + ": " + errno_text());
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return DataLoss(what + ": data file " + file + " is not a regular file");
  if (e.offset > st.st_size || e.size > st.st_size - e.offset)
    return DataLoss(what + ": bytes [" + std::to_string(e.offset) + ", +" + std::to_string(e.size) +
                    ") lie past the end of " + file + " (" + std::to_string(st.st_size) + " bytes)");
  std::string out(static_cast<size_t>(e.size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd.get(), &out[done], out.size() - done, static_cast<off_t>(e.offset) + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return DataLoss(what + ": reading " + file + ": " + (n < 0 ? errno_text() : "file shrank"));
    done += static_cast<size_t>(n);
  }
  if (crc32c_masked(crc32c(out.data(), out.size())) != e.masked_crc)
    return DataLoss(what + ": CRC-32C mismatch in " + file + " at offset " + std::to_string(e.offset));
  if (e.dtype == TfDType::kBool)
    for (char c : out)
      if (c != 0 && c != 1)
        return DataLoss(what + ": bool byte " + std::to_string(static_cast<unsigned char>(c)) + " in " + file);
  return out;
}

Result<TfTensor> TfCheckpointReader::read(const std::string& name) const {
  auto it = name.empty() ? raw_.end() : raw_.find(name);
  if (it == raw_.end() || name[0] == '\0')
    return NotFound("TensorFlow checkpoint " + prefix_ + " has no tensor \"" + printable_key(name) + "\"");
  const RawEntry& e = *it->second;
  const std::string what = "TensorFlow checkpoint " + prefix_ + ", tensor \"" + printable_key(name) + "\"";
  TfTensor out;
  out.dtype = e.dtype;
  out.shape = e.shape;
  if (e.slices.empty()) {
    AF_ASSIGN_OR_RETURN(out.bytes, read_bytes(e, what));
    return out;
  }
  // The slices must tile the tensor: their sizes add up to it (checked before allocating) and
  // no element is written twice.
  const int64_t n = e.shape.num_elements();
  const size_t es = tf_dtype_size(e.dtype);
  int64_t total = 0;
  std::vector<const RawEntry*> parts;
  for (const auto& ext : e.slices) {
    const RawEntry* s = raw_.at(tf_slice_key(name, ext)).get();
    if (!checked_add(total, s->shape.num_elements(), &total)) return DataLoss(what + ": slice sizes overflow");
    parts.push_back(s);
  }
  if (total != n)
    return DataLoss(what + ": its slices hold " + std::to_string(total) + " elements, the tensor " + std::to_string(n));
  // Every slice's bytes exist before the whole is allocated, and the slices of one data file
  // together fit in it (slices sharing bytes could otherwise spell a tensor far larger than the
  // files).
  std::map<int, int64_t> per_shard;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string file = data_file_name(prefix_, parts[i]->shard, num_shards_);
    struct stat st;
    int64_t& sum = per_shard[parts[i]->shard];
    if (::stat(file.c_str(), &st) != 0 || parts[i]->offset > st.st_size ||
        parts[i]->size > st.st_size - parts[i]->offset)
      return DataLoss(what + " slice " + std::to_string(i) + ": bytes [" + std::to_string(parts[i]->offset) + ", +" +
                      std::to_string(parts[i]->size) + ") are not in data file " + file);
    if (parts[i]->size > st.st_size - sum)
      return DataLoss(what + ": its slices in " + file + " hold more bytes than the file (" +
                      std::to_string(st.st_size) + ")");
    sum += parts[i]->size;
  }
  out.bytes.assign(static_cast<size_t>(n) * es, '\0');
  std::vector<bool> covered(static_cast<size_t>(n), false);
  for (size_t i = 0; i < parts.size(); ++i) {
    AF_ASSIGN_OR_RETURN(std::string bytes, read_bytes(*parts[i], what + " slice " + std::to_string(i)));
    bool overlap = false;
    for_each_run(e.shape, e.slices[i], [&](int64_t dst, int64_t src, int64_t run) {
      for (int64_t k = 0; k < run; ++k) {
        if (covered[static_cast<size_t>(dst + k)]) overlap = true;
        covered[static_cast<size_t>(dst + k)] = true;
      }
      std::memcpy(&out.bytes[static_cast<size_t>(dst) * es], &bytes[static_cast<size_t>(src) * es],
                  static_cast<size_t>(run) * es);
    });
    if (overlap) return DataLoss(what + ": slice " + std::to_string(i) + " overlaps another");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

Status fsync_dir(const std::string& path) {
  std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  if (dir.empty()) dir = path.find('/') == 0 ? "/" : ".";
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) return Unavailable("fsync of directory " + dir + ": " + errno_text());
  return Status::OK();
}

// Writes the concatenation of `parts` to `tmp` and fsyncs it.
Status write_synced(const std::string& tmp, const std::vector<const std::string*>& parts) {
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Unavailable("cannot create " + tmp + ": " + errno_text());
  for (const std::string* bytes : parts) {
    size_t done = 0;
    while (done < bytes->size()) {
      ssize_t n = ::write(fd.get(), bytes->data() + done, bytes->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Unavailable("writing " + tmp + ": " + errno_text());
      done += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd.get()) != 0) return Unavailable("fsync of " + tmp + ": " + errno_text());
  return Status::OK();
}

Status write_synced(const std::string& tmp, const std::string& bytes) {
  return write_synced(tmp, std::vector<const std::string*>{&bytes});
}

// Temporary files removed unless committed.
struct TmpFiles {
  std::vector<std::string> names;
  ~TmpFiles() {
    for (const auto& n : names) ::unlink(n.c_str());
  }
};

void set_shape(const Shape& s, tf::TensorShapeProto* p) {
  for (int64_t d : s.dims()) p->add_dim()->set_size(d);
}

}  // namespace

Status write_tf_checkpoint(const std::string& prefix, const std::vector<TfWriteItem>& items, int num_shards) {
  if (num_shards < 1 || num_shards > 100000)
    return InvalidArgument("write_tf_checkpoint " + prefix + ": num_shards " + std::to_string(num_shards) +
                           " outside [1, 100000]");
  std::map<std::string, tf::BundleEntryProto> entries;    // by table key
  std::map<std::string, const TfWriteItem*> partitioned;  // first slice item of each partitioned name
  std::map<std::string, std::vector<const TfWriteItem*>> slices_of;
  // Each data file: the tensors' bytes in order, written from the items themselves (no copy).
  std::vector<int64_t> shard_size(static_cast<size_t>(num_shards), 0);
  std::vector<std::vector<const std::string*>> shard_parts(static_cast<size_t>(num_shards));
  std::vector<const TfWriteItem*> order;
  for (const TfWriteItem& it : items) order.push_back(&it);
  std::stable_sort(order.begin(), order.end(),
                   [](const TfWriteItem* a, const TfWriteItem* b) { return a->name < b->name; });
  for (const TfWriteItem* it : order) {
    const std::string what = "write_tf_checkpoint " + prefix + ", tensor \"" + it->name + "\"";
    if (it->name.empty() || it->name[0] == '\0')
      return InvalidArgument(what + ": empty name or name starting with a 0 byte");
    AF_RETURN_IF_ERROR(check_tf_tensor(it->tensor, what));
    if (it->shard < 0 || it->shard >= num_shards)
      return InvalidArgument(what + ": shard " + std::to_string(it->shard) + " outside [0, " +
                             std::to_string(num_shards) + ")");
    std::string key = it->name;
    if (!it->slice.empty()) {
      const Shape& full = it->full_shape;
      if (!full.valid_for_tensor() || full.rank() != static_cast<int>(it->slice.size()))
        return InvalidArgument(what + ": slice of " + std::to_string(it->slice.size()) + " extents for shape " +
                               full.to_string());
      for (size_t d = 0; d < it->slice.size(); ++d) {
        const TfExtent& x = it->slice[d];
        int64_t end;
        if (x.length != -1 && (x.start < 0 || x.length < 0 || !checked_add(x.start, x.length, &end) ||
                               end > full.dim(static_cast<int>(d))))
          return InvalidArgument(what + ": slice extent " + std::to_string(d) + " outside " + full.to_string());
      }
      if (slice_shape(full, it->slice) != it->tensor.shape)
        return InvalidArgument(what + ": slice part has shape " + it->tensor.shape.to_string() + ", its extents say " +
                               slice_shape(full, it->slice).to_string());
      auto [p, fresh] = partitioned.emplace(it->name, it);
      if (!fresh && (p->second->tensor.dtype != it->tensor.dtype || p->second->full_shape != full))
        return InvalidArgument(what + ": slices disagree on dtype or full shape");
      slices_of[it->name].push_back(it);
      key = tf_slice_key(it->name, it->slice);
    }
    tf::BundleEntryProto e;
    e.set_dtype(static_cast<tf::DataType>(static_cast<int>(it->tensor.dtype)));
    set_shape(it->tensor.shape, e.mutable_shape());
    int64_t& offset = shard_size[static_cast<size_t>(it->shard)];
    e.set_shard_id(it->shard);
    e.set_offset(offset);
    e.set_size(static_cast<int64_t>(it->tensor.bytes.size()));
    e.set_crc32c(crc32c_masked(crc32c(it->tensor.bytes.data(), it->tensor.bytes.size())));
    offset += static_cast<int64_t>(it->tensor.bytes.size());  // in memory already: cannot overflow
    shard_parts[static_cast<size_t>(it->shard)].push_back(&it->tensor.bytes);
    if (!entries.emplace(key, std::move(e)).second) return InvalidArgument(what + ": written twice");
  }
  for (const auto& [name, parts] : slices_of) {
    const std::string what = "write_tf_checkpoint " + prefix + ", tensor \"" + name + "\"";
    if (entries.count(name)) return InvalidArgument(what + ": written both whole and as slices");
    const TfWriteItem* first = parts.front();
    const int64_t n = first->full_shape.num_elements();
    int64_t total = 0;
    for (const TfWriteItem* p : parts)
      if (!checked_add(total, p->tensor.shape.num_elements(), &total))
        return InvalidArgument(what + ": slice sizes overflow");
    if (total != n)
      return InvalidArgument(what + ": slices hold " + std::to_string(total) + " of " + std::to_string(n) +
                             " elements");
    std::vector<bool> covered(static_cast<size_t>(n), false);
    tf::BundleEntryProto e;
    e.set_dtype(static_cast<tf::DataType>(static_cast<int>(first->tensor.dtype)));
    set_shape(first->full_shape, e.mutable_shape());
    for (const TfWriteItem* p : parts) {
      bool overlap = false;
      for_each_run(first->full_shape, p->slice, [&](int64_t dst, int64_t, int64_t run) {
        for (int64_t k = 0; k < run; ++k) {
          overlap = overlap || covered[static_cast<size_t>(dst + k)];
          covered[static_cast<size_t>(dst + k)] = true;
        }
      });
      if (overlap) return InvalidArgument(what + ": slices overlap");
      auto* ps = e.add_slices();
      for (const TfExtent& x : p->slice) {
        auto* pe = ps->add_extent();
        if (x.length != -1) {
          pe->set_start(x.start);
          pe->set_length(x.length);
        }
      }
    }
    entries.emplace(name, std::move(e));
  }

  TmpFiles tmp;
  const std::string suffix = ".tmp." + std::to_string(::getpid());
  std::vector<std::pair<std::string, std::string>> renames;
  for (int s = 0; s < num_shards; ++s) {
    const std::string final_name = data_file_name(prefix, s, num_shards);
    tmp.names.push_back(final_name + suffix);
    AF_RETURN_IF_ERROR(write_synced(tmp.names.back(), shard_parts[static_cast<size_t>(s)]));
    renames.emplace_back(tmp.names.back(), final_name);
  }
  // The index through Debian's LevelDB table builder with TensorFlow's table options.
  const std::string index = prefix + ".index";
  tmp.names.push_back(index + suffix);
  {
    leveldb::WritableFile* raw = nullptr;
    leveldb::Status ls = leveldb::Env::Default()->NewWritableFile(tmp.names.back(), &raw);
    if (!ls.ok()) return Unavailable("cannot create " + tmp.names.back() + ": " + ls.ToString());
    std::unique_ptr<leveldb::WritableFile> out(raw);
    leveldb::Options opt;
    opt.compression = leveldb::kNoCompression;
    opt.block_size = 262144;
    opt.block_restart_interval = 16;
    leveldb::TableBuilder builder(opt, out.get());
    tf::BundleHeaderProto header;
    header.set_num_shards(num_shards);
    header.set_endianness(tf::BundleHeaderProto::LITTLE);
    header.mutable_version()->set_producer(1);
    builder.Add("", header.SerializeAsString());
    for (const auto& [key, e] : entries) builder.Add(key, e.SerializeAsString());
    ls = builder.Finish();
    if (ls.ok()) ls = out->Sync();
    if (ls.ok()) ls = out->Close();
    if (!ls.ok()) return Unavailable("writing " + tmp.names.back() + ": " + ls.ToString());
  }
  renames.emplace_back(tmp.names.back(), index);
  for (const auto& [from, to] : renames)
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Unavailable("renaming " + from + " to " + to + ": " + errno_text());
  tmp.names.clear();
  return fsync_dir(index);
}

// ---------------------------------------------------------------------------------------------
// The `checkpoint` state file

namespace {
class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first.empty()) first = "line " + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  std::string first;
};
}  // namespace

Result<TfCheckpointState> read_tf_checkpoint_state(const std::string& dir) {
  const std::string file = dir + "/checkpoint";
  auto text = read_regular_file(file, 1 << 20, "TensorFlow checkpoint state file");
  if (!text.ok()) return text.status();
  tf::CheckpointState st;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*text, &st))
    return DataLoss("TensorFlow checkpoint state file " + file + " does not parse: " + errors.first);
  TfCheckpointState out;
  out.model_checkpoint_path = st.model_checkpoint_path();
  out.all_model_checkpoint_paths.assign(st.all_model_checkpoint_paths().begin(), st.all_model_checkpoint_paths().end());
  return out;
}

Result<std::string> latest_tf_checkpoint(const std::string& dir) {
  AF_ASSIGN_OR_RETURN(TfCheckpointState st, read_tf_checkpoint_state(dir));
  if (st.model_checkpoint_path.empty())
    return NotFound("TensorFlow checkpoint state file " + dir + "/checkpoint names no checkpoint");
  if (st.model_checkpoint_path[0] == '/') return st.model_checkpoint_path;
  return dir + "/" + st.model_checkpoint_path;
}

Status write_tf_checkpoint_state(const std::string& dir, const TfCheckpointState& state) {
  tf::CheckpointState st;
  st.set_model_checkpoint_path(state.model_checkpoint_path);
  for (const auto& p : state.all_model_checkpoint_paths) st.add_all_model_checkpoint_paths(p);
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(st, &text)) return Internal("cannot print CheckpointState");
  const std::string file = dir + "/checkpoint";
  TmpFiles tmp;
  tmp.names.push_back(file + ".tmp." + std::to_string(::getpid()));
  AF_RETURN_IF_ERROR(write_synced(tmp.names.back(), text));
  if (::rename(tmp.names.back().c_str(), file.c_str()) != 0)
    return Unavailable("renaming " + tmp.names.back() + " to " + file + ": " + errno_text());
  tmp.names.clear();
  return fsync_dir(file);
}

Result<std::string> tf_sharded_filename(const std::string& basename, int64_t shard, int64_t num_shards) {
  if (num_shards < 1 || num_shards > 99999 || shard < 0 || shard >= num_shards)
    return InvalidArgument("shard " + std::to_string(shard) + " of " + std::to_string(num_shards) +
                           " (0 <= shard < num_shards <= 99999)");
  char tail[32];
  std::snprintf(tail, sizeof tail, "-%05lld-of-%05lld", static_cast<long long>(shard), static_cast<long long>(num_shards));
  return basename + tail;
}

Status merge_tf_checkpoints(const std::vector<std::string>& prefixes, const std::string& dest, bool delete_old_dirs,
                            bool allow_missing_files) {
  if (prefixes.empty()) return InvalidArgument("merging TensorFlow checkpoints into " + dest + ": no input bundles");
  auto dir_of = [](const std::string& p) {
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : p.substr(0, slash);
  };
  std::vector<TfCheckpointReader> readers;
  std::vector<std::string> present;
  for (const std::string& p : prefixes) {
    if (p == dest) return InvalidArgument("merging TensorFlow checkpoints: the destination " + dest + " is also an input");
    auto r = TfCheckpointReader::open(p);
    if (!r.ok()) {
      if (r.status().code() == Code::kNotFound && allow_missing_files) continue;
      return r.status();
    }
    readers.push_back(std::move(*r));
    present.push_back(p);
  }
  if (readers.empty()) return NotFound("merging TensorFlow checkpoints into " + dest + ": no input bundle exists");
  std::vector<TfWriteItem> items;
  std::map<std::string, std::string> owner;
  for (size_t k = 0; k < readers.size(); ++k) {
    for (const TfEntryInfo& e : readers[k].entries()) {
      auto [it, fresh] = owner.emplace(e.name, present[k]);
      if (!fresh)
        return InvalidArgument("merging TensorFlow checkpoints into " + dest + ": entry '" + e.name.substr(0, 200) +
                               "' is in both " + it->second + " and " + present[k]);
      AF_ASSIGN_OR_RETURN(TfTensor t, readers[k].read(e.name));
      TfWriteItem item;
      item.name = e.name;
      item.tensor = std::move(t);
      item.shard = static_cast<int>(k);
      items.push_back(std::move(item));
    }
  }
  AF_RETURN_IF_ERROR(write_tf_checkpoint(dest, items, static_cast<int>(readers.size())));
  // The merged bundle is in place: the inputs go (a failure to remove one is not an error, as in
  // TensorFlow: the checkpoint itself is complete).
  for (size_t k = 0; k < readers.size(); ++k) {
    const std::string& p = present[k];
    ::unlink((p + ".index").c_str());
    for (int s = 0; s < readers[k].num_shards(); ++s) {
      auto name = tf_sharded_filename(p + ".data", s, readers[k].num_shards());
      if (name.ok()) ::unlink(name->c_str());
    }
    if (delete_old_dirs && dir_of(p) != dir_of(dest)) ::rmdir(dir_of(p).c_str());
  }
  return Status::OK();
}

}  // namespace actorflow
