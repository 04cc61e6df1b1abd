// Seeded mutation for fuzz tests: bit flips, byte inserts and deletes, truncation, splices with
// other corpus entries, and interesting integers (0, 2^28, 2^40, 2^62, all ones, ...) written over
// the input. Deterministic for a given rng state, so a failing case reproduces from its seed.
#pragma once

#include <random>
#include <string>
#include <vector>

namespace actorflow {
namespace testing {

// One to four mutations of `in`; `corpus` (non-empty) feeds splices. May return a shorter,
// longer or empty string.
std::string mutate(const std::string& in, const std::vector<std::string>& corpus, std::mt19937_64& rng);

}  // namespace testing
}  // namespace actorflow
