// Reading limits from the environment.
#pragma once

#include <cstdint>

namespace actorflow {

// The value of environment variable `name` when it is a positive decimal integer (at most
// INT64_MAX), else `fallback`; a value that is set but not such an integer is logged at WARNING
// naming the variable and the value used. Thread-safe (reads the environment only).
int64_t positive_env_int(const char* name, int64_t fallback);

}  // namespace actorflow
