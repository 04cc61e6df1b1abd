#include "device/gpu_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace actorflow {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

Result<std::vector<int>> parse_visible_devices(const std::string& spec) {
  std::vector<int> out;
  if (trim(spec).empty()) return out;
  const std::string where = "visible_devices '" + spec + "': ";
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    std::string item = trim(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) return InvalidArgument(where + "empty entry (expected a comma-separated list such as \"1,0\")");
    bool digits = item.size() <= 6 && std::all_of(item.begin(), item.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
    if (!digits) return InvalidArgument(where + "'" + item + "' is not a GPU index");
    int v = std::stoi(item);
    if (std::find(out.begin(), out.end(), v) != out.end())
      return InvalidArgument(where + "GPU " + item + " is listed twice");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<std::vector<int>> resolve_visible_devices(const std::string& spec, int num_cuda_devices) {
  AF_ASSIGN_OR_RETURN(std::vector<int> ids, parse_visible_devices(spec));
  if (ids.empty()) {
    for (int i = 0; i < num_cuda_devices; ++i) ids.push_back(i);
    return ids;
  }
  for (int id : ids) {
    if (id >= num_cuda_devices)
      return InvalidArgument("visible_devices '" + spec + "': GPU " + std::to_string(id) + " does not exist; " +
                             std::to_string(num_cuda_devices) +
                             " GPU(s) are visible to this process (indices count after CUDA_VISIBLE_DEVICES)");
  }
  return ids;
}

Status validate_gpu_options(const DeviceEnumerationOptions& opts) {
  AF_RETURN_IF_ERROR(parse_visible_devices(opts.visible_devices).status());
  if (!(opts.gpu_memory_fraction >= 0.0 && opts.gpu_memory_fraction <= 1.0))
    return InvalidArgument("gpu_memory_fraction must be in [0, 1] (0 = all free memory), got " +
                           std::to_string(opts.gpu_memory_fraction));
  return Status::OK();
}

int64_t gpu_memory_limit(double fraction, int64_t total_bytes, int64_t free_bytes) {
  int64_t limit;
  if (fraction > 0) {
    limit = static_cast<int64_t>(std::floor(static_cast<double>(total_bytes) * fraction));
  } else {
    const int64_t reserve = std::max<int64_t>(int64_t{64} << 20, free_bytes / 20);
    limit = free_bytes - reserve;
    if (limit <= 0) limit = free_bytes / 2;  // tiny device: leave half for the driver
  }
  limit = limit / 256 * 256;
  if (limit < 256 && free_bytes >= 256) limit = 256;
  return limit;
}

}  // namespace actorflow
