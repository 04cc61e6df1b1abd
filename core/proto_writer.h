// Hand-written protobuf wire encoding for the few TensorFlow protos actorflow writes (Event,
// Summary, HistogramProto, GraphDef): no protobuf dependency, field numbers given by the callers.
// Each function appends to `out`. Pure, header-only; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace actorflow {
namespace proto {

// Protobuf wire types.
enum Wire : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// `bytes` little-endian bytes of v.
inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline void put_key(std::string& out, int field, Wire wire) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire));
}

// A string, bytes or embedded message field.
inline void put_bytes(std::string& out, int field, const std::string& b) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, b.size());
  out += b;
}

// An int64/uint64/enum/bool field (negative int64 as its two's complement, as protobuf does).
inline void put_uint(std::string& out, int field, uint64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, v);
}

inline void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

inline void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

// A packed repeated double field (proto3's default for repeated scalars).
inline void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  std::string packed;
  for (double d : v) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    put_le(packed, bits, 8);
  }
  put_bytes(out, field, packed);
}

}  // namespace proto
}  // namespace actorflow
