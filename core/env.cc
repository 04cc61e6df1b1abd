#include "core/env.h"

#include <cerrno>
#include <cstdlib>

#include "core/logging.h"

namespace actorflow {

int64_t positive_env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x <= 0) {
    AF_LOG(WARNING) << name << "='" << v << "' is not a positive integer; using " << fallback;
    return fallback;
  }
  return static_cast<int64_t>(x);
}

}  // namespace actorflow
