// A guard in front of toml++ for text from users and peers.
//
// Debian's toml++ 3.3.0 reaches __builtin_unreachable (undefined behaviour) in
// is_non_ascii_horizontal_whitespace for many non-ASCII code points (e.g. U+00E9), which its
// parser calls on characters it records or skips, even inside strings and comments; found by
// tests/fuzz_readers_test.cc under UndefinedBehaviorSanitizer. So actorflow's TOML files (cluster
// files, fault plans) are ASCII: a non-ASCII byte is refused, with its line and column, before
// the text reaches toml++.
#pragma once

#include <string>
#include <string_view>

namespace actorflow {

struct TomlAsciiError {
  int line = 0;    // 1-based; 0 = none
  int column = 0;  // 1-based, in bytes
  unsigned byte = 0;
};

// The first non-ASCII byte of `text` (line 0 when there is none). Pure; thread-safe.
TomlAsciiError first_non_ascii(std::string_view text);

// "non-ASCII byte 0xC3 (cluster files are ASCII ...)" for error messages.
std::string non_ascii_message(const TomlAsciiError& e, const std::string& what);

}  // namespace actorflow
