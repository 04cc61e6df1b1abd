#include "config/toml_read.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>

#include "config/toml_guard.h"

namespace actorflow {

TomlPos toml_pos(const toml::source_region& r) {
  return TomlPos{static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

const char* toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

std::string shortest_number(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double d) {
  std::string s = shortest_number(d);
  if (s.find_first_of(".eE") == std::string::npos && s.find("inf") == std::string::npos &&
      s.find("nan") == std::string::npos)
    s += ".0";
  return s;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                                                std::tolower(static_cast<unsigned char>(b[j - 1]))
                                            ? 0
                                            : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string suggest_name(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& k : known) {
    const size_t d = edit_distance(name, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (best_d <= 2 || best_d <= name.size() / 3) return " (did you mean '" + best + "'?)";
  return " (known: " + join_names(known) + ")";
}

TomlReader::TomlReader(std::string source, size_t max_reported)
    : source_(std::move(source)), max_reported_(max_reported) {}

void TomlReader::error(TomlPos p, const std::string& path, const std::string& what) {
  std::string text = source_ + ":";
  if (p.line > 0) text += std::to_string(p.line) + ":" + std::to_string(p.column) + ":";
  text += " ";
  if (!path.empty()) text += path + ": ";
  errors_.push_back(Error{p, text + what});
}

Status TomlReader::status() const {
  if (errors_.empty()) return Status::OK();
  std::vector<const Error*> sorted;
  for (const Error& e : errors_) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Error* a, const Error* b) {
    const int la = a->pos.line > 0 ? a->pos.line : INT_MAX, lb = b->pos.line > 0 ? b->pos.line : INT_MAX;
    return la != lb ? la < lb : a->pos.column < b->pos.column;
  });
  std::string msg;
  for (size_t i = 0; i < sorted.size() && i < max_reported_; ++i) msg += (i ? "\n" : "") + sorted[i]->text;
  if (sorted.size() > max_reported_)
    msg += "\n... and " + std::to_string(sorted.size() - max_reported_) + " more errors";
  return InvalidArgument(msg);
}

bool TomlReader::parse(std::string_view text, const std::string& what, toml::table* root) {
  if (const TomlAsciiError bad = first_non_ascii(text); bad.line > 0) {
    error(TomlPos{bad.line, bad.column}, "", non_ascii_message(bad, what));
    return false;
  }
  try {
    *root = toml::parse(text, std::string_view(source_));
  } catch (const toml::parse_error& e) {
    error(toml_pos(e.source()), "", "TOML syntax error: " + std::string(e.description()));
    return false;
  }
  return true;
}

void TomlReader::unknown_key(const toml::key& k, const std::string& path, const std::vector<std::string>& known,
                             const char* what) {
  error(toml_pos(k.source()), path, what + suggest_name(std::string(k.str()), known));
}

bool TomlReader::read_bool(const toml::node& v, const std::string& path, bool* out) {
  if (const auto* b = v.as_boolean()) {
    *out = b->get();
    return true;
  }
  error(toml_pos(v.source()), path, std::string("expected a boolean (true or false), got ") + toml_type_name(v));
  return false;
}

bool TomlReader::read_string(const toml::node& v, const std::string& path, std::string* out) {
  if (const auto* s = v.as_string()) {
    *out = s->get();
    return true;
  }
  error(toml_pos(v.source()), path, std::string("expected a string, got ") + toml_type_name(v));
  return false;
}

bool TomlReader::read_integer(const toml::node& v, const std::string& path, int64_t* out) {
  if (const auto* i = v.as_integer()) {
    *out = i->get();
    return true;
  }
  error(toml_pos(v.source()), path, std::string("expected an integer, got ") + toml_type_name(v));
  return false;
}

bool TomlReader::read_int(const toml::node& v, const std::string& path, int64_t lo, int64_t hi, int* out) {
  int64_t x = 0;
  if (!read_integer(v, path, &x)) return false;
  if (x < lo || x > hi) {
    const std::string range = hi >= INT_MAX ? "must be >= " + std::to_string(lo)
                                            : "must be in " + std::to_string(lo) + ".." + std::to_string(hi);
    error(toml_pos(v.source()), path, range + ", got " + std::to_string(x));
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}

bool TomlReader::read_number(const toml::node& v, const std::string& path, double* out) {
  double x = 0;
  if (const auto* f = v.as_floating_point()) {
    x = f->get();
  } else if (const auto* i = v.as_integer()) {
    x = static_cast<double>(i->get());
  } else {
    error(toml_pos(v.source()), path, std::string("expected a number, got ") + toml_type_name(v));
    return false;
  }
  if (!std::isfinite(x)) {
    error(toml_pos(v.source()), path, "must be a finite number, got " + shortest_number(x));
    return false;
  }
  *out = x;
  return true;
}

bool TomlReader::read_number_in(const toml::node& v, const std::string& path, double lo, bool lo_inclusive,
                                double hi, double* out) {
  double x = 0;
  if (!read_number(v, path, &x)) return false;
  if (x < lo || (!lo_inclusive && x == lo) || x > hi) {
    std::string range;
    if (std::isfinite(hi)) {
      range = "must be in " + std::string(lo_inclusive ? "[" : "(") + shortest_number(lo) + ", " +
              shortest_number(hi) + "]";
    } else {
      range = std::string("must be ") + (lo_inclusive ? ">= " : "> ") + shortest_number(lo);
    }
    error(toml_pos(v.source()), path, range + ", got " + shortest_number(x));
    return false;
  }
  *out = x;
  return true;
}

}  // namespace actorflow
