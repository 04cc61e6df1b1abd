// The TOML helpers that actorflow's TOML readers share: cluster files (config/cluster_file.cc) and
// fault plans (config/fault_plan.cc).
//
// TomlReader collects every mistake in one text as "<source>:<line>:<column>: <path>: <what>" and
// reports them together, in file order; its typed readers (read_string, read_integer, ...) report
// a wrong type or value that way. toml_string and toml_float write values back as TOML.
//
// Internal to config/: this header includes toml++ (header-only), whose exceptions TomlReader::parse
// catches, so none crosses a reader's API. Text reaches toml++ only after the ASCII guard of
// config/toml_guard.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "core/status.h"

namespace actorflow {

// A position in a TOML text: 1-based line and column (in bytes); line 0 = unknown (e.g. a job map
// given in code).
struct TomlPos {
  int line = 0;
  int column = 0;
};

// Where a region of the text begins. Pure.
TomlPos toml_pos(const toml::source_region& r);

// "string", "integer", "float", "boolean", "table", "array", "date", "time", "date-time", for
// "expected X, got <type>" messages. Pure; the pointer is to a static string.
const char* toml_type_name(const toml::node& n);

// The shortest decimal that reads back as `d` ("0.5", "3", "1e+20", "inf", "nan"),
// locale-independent. Pure.
std::string shortest_number(double d);

// `s` as a TOML basic string, quoted and escaped ("a\"b" -> "\"a\\\"b\""). Pure.
std::string toml_string(const std::string& s);

// `d` as a TOML float: shortest_number with ".0" added when it would read back as an integer. Pure.
std::string toml_float(double d);

// "a, b, c". Pure.
std::string join_names(const std::vector<std::string>& names);

// The message suffix for an unknown name: " (did you mean 'x'?)" when one of `known` is within a
// small, case-insensitive edit distance of `name`, else " (known: a, b, c)". Pure.
std::string suggest_name(const std::string& name, const std::vector<std::string>& known);

// Collects the mistakes of one TOML text and reads typed values, reporting wrong ones. Readers of
// a format derive from it (privately) and report with error(). Single use; not thread-safe.
class TomlReader {
 public:
  // `source`: the file name that starts every message. At most `max_reported` errors are listed
  // (then "... and N more errors").
  explicit TomlReader(std::string source, size_t max_reported = std::numeric_limits<size_t>::max());

  const std::string& source() const { return source_; }

  // Records "<source>:<line>:<column>: <path>: <what>" ("<source>: ..." when p.line is 0; no
  // "<path>: " when `path` is empty).
  void error(TomlPos p, const std::string& path, const std::string& what);
  // True when no error was recorded.
  bool clean() const { return errors_.empty(); }
  // OK when no error was recorded; else InvalidArgument listing them one a line, sorted by
  // position (errors without a position last; equal positions in the order reported).
  Status status() const;

  // Parses `text` into *root. A non-ASCII byte ("<what> must be ASCII", `what` e.g. "cluster
  // files") or a TOML syntax error is recorded and false returned; toml++'s exception never
  // escapes.
  bool parse(std::string_view text, const std::string& what, toml::table* root);

  // Records "<path>: <what> (did you mean 'x'?)" (or "(known: ...)") at key `k`.
  void unknown_key(const toml::key& k, const std::string& path, const std::vector<std::string>& known,
                   const char* what = "unknown key");

  // Typed readers: each stores the value of `v` in *out and returns true, or records at v's
  // position "<path>: expected a <type>, got <type>" (or a range error) and returns false,
  // leaving *out unchanged.
  bool read_bool(const toml::node& v, const std::string& path, bool* out);
  bool read_string(const toml::node& v, const std::string& path, std::string* out);
  bool read_integer(const toml::node& v, const std::string& path, int64_t* out);
  // An integer in [lo, hi] ("must be >= lo" when hi >= INT_MAX; "must be in lo..hi" else).
  bool read_int(const toml::node& v, const std::string& path, int64_t lo, int64_t hi, int* out);
  // A finite number, integer or float ("must be a finite number, got inf").
  bool read_number(const toml::node& v, const std::string& path, double* out);
  // A finite number in [lo, hi] (or (lo, hi] when !lo_inclusive); hi may be infinity.
  bool read_number_in(const toml::node& v, const std::string& path, double lo, bool lo_inclusive, double hi,
                      double* out);

 private:
  struct Error {
    TomlPos pos;
    std::string text;
  };

  std::string source_;
  size_t max_reported_;
  std::vector<Error> errors_;
};

}  // namespace actorflow
