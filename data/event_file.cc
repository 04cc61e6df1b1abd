#include "data/event_file.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "data/crc32c.h"

namespace actorflow {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Protobuf wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit.
void put_key(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }

void put_bytes(std::string& out, int field, const std::string& b) {
  put_key(out, field, 2);
  put_varint(out, b.size());
  out += b;
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

double now_secs() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string event_record(const std::string& data) {
  std::string out;
  std::string len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, crc32c_masked(crc32c(len.data(), len.size())), 4);
  out += data;
  put_le(out, crc32c_masked(crc32c(data.data(), data.size())), 4);
  return out;
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5.
// Summary: value = 1 (repeated Value). Value: tag = 1 (string), simple_value = 2 (float).
std::string scalar_event(double wall_time, int64_t step, const std::map<std::string, double>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  std::string ev;
  put_double(ev, 1, wall_time);
  put_key(ev, 2, 0);
  put_varint(ev, static_cast<uint64_t>(step));
  put_bytes(ev, 5, summary);
  return ev;
}

std::string file_version_event(double wall_time, const std::string& version) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_bytes(ev, 3, version);
  return ev;
}

Result<std::unique_ptr<EventFileWriter>> EventFileWriter::open(const std::string& logdir, const std::string& suffix) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec) return Unavailable("cannot create directory " + logdir + ": " + ec.message());
  char host[256] = "localhost";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  const double t = now_secs();
  const std::string path = logdir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host + suffix;
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) return Unavailable("cannot create event file " + path + ": " + std::strerror(errno));
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(f, path));
  AF_RETURN_IF_ERROR(w->write(file_version_event(t)));
  return w;
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

Status EventFileWriter::add_scalars(int64_t step, const std::map<std::string, double>& values) {
  return write(scalar_event(now_secs(), step, values));
}

Status EventFileWriter::write(const std::string& data) {
  const std::string rec = event_record(data);
  std::lock_guard<std::mutex> l(mu_);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    return Unavailable("cannot write event file " + path_ + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace actorflow
