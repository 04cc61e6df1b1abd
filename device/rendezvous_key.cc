#include "device/rendezvous_key.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <tuple>

namespace actorflow {
namespace {

// The first bytes of `s` for an error message, control characters and quotes escaped.
std::string quoted(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "'";
  const size_t shown = std::min<size_t>(s.size(), 96);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += shown < s.size() ? "'... (" + std::to_string(s.size()) + " bytes)" : "'";
  return out;
}

// Empty when `field` may be the key's field `what` (a device name when `device`), else why not.
std::string field_error(std::string_view field, const char* what, bool device) {
  if (field.empty()) return std::string("empty ") + what;
  if (device && field[0] != '/') return std::string(what) + " " + quoted(field) + " does not start with '/'";
  for (char ch : field) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == ';') return std::string(what) + " " + quoted(field) + " holds ';'";
    if (c < 0x20 || c == 0x7f) return std::string(what) + " " + quoted(field) + " holds a control character";
  }
  return "";
}

// config/task_names.h's task_of_device (device/ may not include config/).
std::string task_of(const std::string& device) {
  const auto d = device.find("/device:");
  return d == std::string::npos ? device : device.substr(0, d);
}

}  // namespace

std::string incarnation_hex(uint64_t incarnation) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, incarnation >>= 4) out[static_cast<size_t>(i)] = kHex[incarnation & 15];
  return out;
}

uint64_t new_incarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) {
    v = (uint64_t{rd()} << 32) ^ uint64_t{rd()} ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return v;
}

Result<RendezvousKey> RendezvousKey::make(std::string src_device, uint64_t src_incarnation, std::string dst_device,
                                          std::string edge) {
  for (auto [f, what, device] : {std::make_tuple(&src_device, "source device", true),
                                 std::make_tuple(&dst_device, "destination device", true),
                                 std::make_tuple(&edge, "edge", false)}) {
    const std::string e = field_error(*f, what, device);
    if (!e.empty()) return InvalidArgument("rendezvous key: " + e);
  }
  RendezvousKey k;
  k.wire_.reserve(src_device.size() + dst_device.size() + edge.size() + 20);
  k.wire_ = src_device;
  k.wire_ += ';';
  if (src_incarnation != 0) {
    k.wire_ += incarnation_hex(src_incarnation);
    k.wire_ += ';';
  }
  k.wire_ += dst_device;
  k.wire_ += ';';
  k.wire_ += edge;
  if (k.wire_.size() > kMaxWireBytes)
    return InvalidArgument("rendezvous key: " + std::to_string(k.wire_.size()) + " bytes for edge " + quoted(edge) +
                           " (at most " + std::to_string(kMaxWireBytes) + ")");
  k.src_task_ = task_of(src_device);
  k.dst_task_ = task_of(dst_device);
  k.src_device_ = std::move(src_device);
  k.dst_device_ = std::move(dst_device);
  k.edge_ = std::move(edge);
  k.src_incarnation_ = src_incarnation;
  return k;
}

Result<RendezvousKey> RendezvousKey::parse(std::string_view wire) {
  if (wire.size() > kMaxWireBytes)
    return InvalidArgument("rendezvous key of " + std::to_string(wire.size()) + " bytes (at most " +
                           std::to_string(kMaxWireBytes) + "): " + quoted(wire));
  std::string_view f[4];
  size_t n = 0, from = 0;
  while (true) {
    const size_t semi = wire.find(';', from);
    if (n == 4) return InvalidArgument("rendezvous key with more than 4 ';'-separated fields: " + quoted(wire));
    f[n++] = wire.substr(from, semi == std::string_view::npos ? std::string_view::npos : semi - from);
    if (semi == std::string_view::npos) break;
    from = semi + 1;
  }
  if (n < 3)
    return InvalidArgument("rendezvous key with " + std::to_string(n) +
                           " ';'-separated field(s) (want src;dst;edge or src;incarnation;dst;edge): " + quoted(wire));
  uint64_t inc = 0;
  if (n == 4) {
    const std::string_view h = f[1];
    bool hex = h.size() == 16;
    for (size_t i = 0; hex && i < h.size(); ++i) {
      const char c = h[i];
      if (c >= '0' && c <= '9') inc = inc << 4 | static_cast<uint64_t>(c - '0');
      else if (c >= 'a' && c <= 'f') inc = inc << 4 | static_cast<uint64_t>(c - 'a' + 10);
      else hex = false;
    }
    if (!hex || inc == 0)
      return InvalidArgument("rendezvous key with a bad incarnation " + quoted(h) +
                             " (want 16 lowercase hex digits, not all 0): " + quoted(wire));
  }
  const std::string_view src = f[0], dst = f[n - 2], edge = f[n - 1];
  for (auto [v, what, device] : {std::make_tuple(src, "source device", true),
                                 std::make_tuple(dst, "destination device", true),
                                 std::make_tuple(edge, "edge", false)}) {
    const std::string e = field_error(v, what, device);
    if (!e.empty()) return InvalidArgument("rendezvous key with " + e + ": " + quoted(wire));
  }
  RendezvousKey k;
  k.src_device_ = std::string(src);
  k.dst_device_ = std::string(dst);
  k.edge_ = std::string(edge);
  k.src_incarnation_ = inc;
  k.src_task_ = task_of(k.src_device_);
  k.dst_task_ = task_of(k.dst_device_);
  k.wire_ = std::string(wire);
  return k;
}

Status RendezvousKey::check_incarnation(uint64_t current) const {
  if (src_incarnation_ == 0 || current == 0 || src_incarnation_ == current) return Status::OK();
  return Aborted("stale tensor " + wire_ + ": sent by (or planned for) incarnation " +
                 incarnation_hex(src_incarnation_) + " of " + src_task_ + ", which now runs as incarnation " +
                 incarnation_hex(current));
}

}  // namespace actorflow
