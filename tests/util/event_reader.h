// Reads TensorBoard event files back for tests, independently of data/event_file.cc: its own
// bitwise CRC-32C, TFRecord framing checks, and a minimal protobuf decoder for the Event fields
// actorflow writes. Test-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace actorflow {
namespace testing {

// CRC-32C bit by bit (reflected polynomial 0x82F63B78): slow and obviously right.
inline uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
inline uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

struct DecodedHistogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

struct DecodedNode {
  std::string name, op, device;
  std::vector<std::string> inputs;
  std::vector<std::vector<int64_t>> output_shapes;  // attr "_output_shapes" (-1: unknown dim)
};

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;  // tag -> simple_value
  std::map<std::string, DecodedHistogram> histograms;  // tag -> histo
  bool has_graph = false;
  std::vector<DecodedNode> graph;        // graph_def's nodes
  int64_t graph_producer = -1;           // graph_def.versions.producer
  std::string run_metadata_tag;          // tagged_run_metadata.tag ("" when there is none)
  std::vector<std::string> run_devices;  // its run_metadata.step_stats.dev_stats' devices
  std::map<std::string, int64_t> run_node_ns;  // node_name -> all_end_rel_nanos (the last one seen)
};

inline double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

inline std::vector<double> packed_doubles(const std::string& b) {
  std::vector<double> out;
  for (size_t at = 0; at + 8 <= b.size(); at += 8) {
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits |= static_cast<uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
    out.push_back(as_double(bits));
  }
  return out;
}

struct EventFileContents {
  std::string error;  // "" when every record's framing and CRCs are right
  std::vector<DecodedEvent> events;
};

inline uint64_t read_le(const std::string& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

inline bool read_varint(const std::string& b, size_t& at, uint64_t* v) {
  *v = 0;
  for (int shift = 0; at < b.size() && shift < 64; shift += 7) {
    const auto c = static_cast<unsigned char>(b[at++]);
    *v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

// Calls f(field, wire type, varint or fixed value, bytes) for each field of message `m`; false on
// a malformed message.
template <class F>
bool for_each_field(const std::string& m, F&& f) {
  size_t at = 0;
  while (at < m.size()) {
    uint64_t key;
    if (!read_varint(m, at, &key)) return false;
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    uint64_t v = 0;
    std::string bytes;
    if (wire == 0) {
      if (!read_varint(m, at, &v)) return false;
    } else if (wire == 1 || wire == 5) {
      const int n = wire == 1 ? 8 : 4;
      if (at + n > m.size()) return false;
      v = read_le(m, at, n);
      at += n;
    } else if (wire == 2) {
      if (!read_varint(m, at, &v) || at + v > m.size()) return false;
      bytes = m.substr(at, v);
      at += v;
    } else {
      return false;
    }
    f(field, wire, v, bytes);
  }
  return true;
}

inline EventFileContents read_event_file(const std::string& path) {
  EventFileContents out;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
  size_t at = 0;
  while (at < b.size()) {
    if (at + 12 > b.size()) return out.error = "truncated header at " + std::to_string(at), out;
    const uint64_t len = read_le(b, at, 8);
    if (read_le(b, at + 8, 4) != masked(crc32c_bitwise(b.substr(at, 8))))
      return out.error = "bad length CRC at " + std::to_string(at), out;
    if (at + 12 + len + 4 > b.size()) return out.error = "truncated record at " + std::to_string(at), out;
    const std::string data = b.substr(at + 12, len);
    if (read_le(b, at + 12 + len, 4) != masked(crc32c_bitwise(data)))
      return out.error = "bad data CRC at " + std::to_string(at), out;
    at += 12 + len + 4;
    DecodedEvent e;
    bool ok = for_each_field(data, [&](int field, int wire, uint64_t v, const std::string& bytes) {
      if (field == 1 && wire == 1) std::memcpy(&e.wall_time, &v, 8);
      if (field == 2 && wire == 0) e.step = static_cast<int64_t>(v);
      if (field == 3 && wire == 2) e.file_version = bytes;
      if (field == 5 && wire == 2)
        for_each_field(bytes, [&](int sf, int sw, uint64_t, const std::string& value) {
          if (sf != 1 || sw != 2) return;
          std::string tag;
          float simple = 0;
          bool is_histo = false;
          DecodedHistogram h;
          for_each_field(value, [&](int vf, int vw, uint64_t vv, const std::string& vb) {
            if (vf == 1 && vw == 2) tag = vb;
            if (vf == 2 && vw == 5) {
              const uint32_t bits = static_cast<uint32_t>(vv);
              std::memcpy(&simple, &bits, 4);
            }
            if (vf == 5 && vw == 2) {
              is_histo = true;
              for_each_field(vb, [&](int hf, int hw, uint64_t hv, const std::string& hb) {
                if (hw == 1) {
                  double* at[] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
                  if (hf >= 1 && hf <= 5) *at[hf - 1] = as_double(hv);
                }
                if (hf == 6 && hw == 2) h.bucket_limit = packed_doubles(hb);
                if (hf == 7 && hw == 2) h.bucket = packed_doubles(hb);
              });
            }
          });
          if (is_histo) e.histograms[tag] = h;
          else e.scalars[tag] = simple;
        });
      if (field == 8 && wire == 2)
        for_each_field(bytes, [&](int tf, int tw, uint64_t, const std::string& tb) {
          if (tf == 1 && tw == 2) e.run_metadata_tag = tb;
          if (tf != 2 || tw != 2) return;
          for_each_field(tb, [&](int rf, int rw, uint64_t, const std::string& step_stats) {
            if (rf != 1 || rw != 2) return;
            for_each_field(step_stats, [&](int sf, int sw, uint64_t, const std::string& dev) {
              if (sf != 1 || sw != 2) return;
              for_each_field(dev, [&](int df, int dw, uint64_t, const std::string& db) {
                if (df == 1 && dw == 2) e.run_devices.push_back(db);
                if (df != 2 || dw != 2) return;
                std::string name;
                int64_t ns = -1;
                for_each_field(db, [&](int nf, int nw, uint64_t nv, const std::string& nb) {
                  if (nf == 1 && nw == 2) name = nb;
                  if (nf == 16 && nw == 0) ns = static_cast<int64_t>(nv);
                });
                e.run_node_ns[name] = ns;
              });
            });
          });
        });
      if (field == 4 && wire == 2) {
        e.has_graph = true;
        for_each_field(bytes, [&](int gf, int gw, uint64_t, const std::string& gb) {
          if (gf == 4 && gw == 2)
            for_each_field(gb, [&](int vf, int vw, uint64_t vv, const std::string&) {
              if (vf == 1 && vw == 0) e.graph_producer = static_cast<int64_t>(vv);
            });
          if (gf != 1 || gw != 2) return;
          DecodedNode n;
          for_each_field(gb, [&](int nf, int nw, uint64_t, const std::string& nb) {
            if (nw != 2) return;
            if (nf == 1) n.name = nb;
            if (nf == 2) n.op = nb;
            if (nf == 3) n.inputs.push_back(nb);
            if (nf == 4) n.device = nb;
            if (nf == 5) {  // map entry {key = 1, value = 2: AttrValue {list = 1: {shape = 7}}}
              std::string key, attr;
              for_each_field(nb, [&](int ef, int, uint64_t, const std::string& eb) {
                if (ef == 1) key = eb;
                if (ef == 2) attr = eb;
              });
              if (key != "_output_shapes") return;
              for_each_field(attr, [&](int af, int, uint64_t, const std::string& list) {
                if (af != 1) return;
                for_each_field(list, [&](int lf, int, uint64_t, const std::string& shape) {
                  if (lf != 7) return;
                  std::vector<int64_t> dims;
                  for_each_field(shape, [&](int sf, int, uint64_t, const std::string& dim) {
                    if (sf != 2) return;
                    for_each_field(dim, [&](int df, int, uint64_t dv, const std::string&) {
                      if (df == 1) dims.push_back(static_cast<int64_t>(dv));
                    });
                  });
                  n.output_shapes.push_back(dims);
                });
              });
            }
          });
          e.graph.push_back(n);
        });
      }
    });
    if (!ok) return out.error = "malformed Event proto", out;
    out.events.push_back(e);
  }
  return out;
}

}  // namespace testing
}  // namespace actorflow
