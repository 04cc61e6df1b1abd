#include "config/toml_guard.h"

#include <cstdio>

namespace actorflow {

TomlAsciiError first_non_ascii(std::string_view text) {
  int line = 1, col = 1;
  for (unsigned char c : text) {
    if (c >= 0x80) return TomlAsciiError{line, col, c};
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return TomlAsciiError{};
}

std::string non_ascii_message(const TomlAsciiError& e, const std::string& what) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", e.byte);
  return std::string("non-ASCII byte ") + hex + ": " + what +
         " must be ASCII (write non-ASCII paths through a symlink; the TOML library mishandles some "
         "non-ASCII characters)";
}

}  // namespace actorflow
