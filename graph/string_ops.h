// The byte-string rules of the string ops a TensorFlow Saver's subgraph needs (graph/ops_io.cc:
// StringJoin, RegexFullMatch, StringSelect, ShardedFilename, MergeV2Checkpoints). actorflow has no
// string dtype: a string scalar is a uint8 vector of its bytes, a vector of strings the bytes of
// each followed by a NUL byte (tf_string_tensor, graph/tf/tf_import.h). Shared by the shape
// functions, which check attributes at graph construction, and the CPU kernels, which check again.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace actorflow {

// The longest string these ops make or read (a path): 64 KiB.
inline constexpr size_t kMaxStringOpBytes = 64 * 1024;

// The regular expressions RegexFullMatch supports: a literal, optionally anchored with '^' and
// '$' (a full match anchors anyway), optionally followed by ".*" (any rest). TensorFlow's Saver
// writes "^s3://.*". Anything else is refused rather than matched differently from RE2, and no
// backtracking engine ever sees a pattern from a graph. A value type.
struct LiteralPattern {
  std::string literal;
  bool any_rest = false;  // ".*" followed the literal
  // Whether `s` matches the whole pattern. Pure.
  bool full_match(std::string_view s) const;
};
// Parses `pattern` (at most 1024 bytes). InvalidArgument naming the pattern and the first
// unsupported character otherwise. Pure.
Result<LiteralPattern> parse_literal_pattern(const std::string& pattern);

// Splits a uint8 string vector's bytes (each string followed by NUL) into its strings.
// InvalidArgument when the bytes do not end in NUL. Pure.
Result<std::vector<std::string>> split_string_vector(std::string_view bytes);

}  // namespace actorflow
