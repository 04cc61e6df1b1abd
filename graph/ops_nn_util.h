// Window arithmetic shared by the neural-network ops' shape functions (graph/ops_nn.cc) and
// their kernels (device/cpu/nn_kernels.cc, device/cuda/): attribute parsing for strides,
// ksize and padding, and TensorFlow's output-size and padding rules for "SAME" and "VALID".
//
// All functions are pure and thread-safe. Errors describe the problem without the op name
// (shape functions and kernels prefix "<Op> '<name>': ").
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {

enum class Padding { kSame, kValid };

// Reads the string attribute "padding": "SAME" or "VALID". InvalidArgument otherwise, e.g.
// `padding must be "SAME" or "VALID", got "FULL"`.
inline Result<Padding> parse_padding(const AttrMap& attrs) {
  auto p = attrs.get<std::string>("padding");
  if (!p.ok()) return InvalidArgument("needs a string attribute 'padding' (\"SAME\" or \"VALID\")");
  if (*p == "SAME") return Padding::kSame;
  if (*p == "VALID") return Padding::kValid;
  return InvalidArgument("padding must be \"SAME\" or \"VALID\", got \"" + *p + "\"");
}

// The largest window or stride one spatial dimension may have (TensorFlow's attributes are
// int32): larger ones are refused before any window arithmetic.
constexpr int64_t kMaxWindow = (int64_t{1} << 31) - 1;

// Reads a 4-element NHWC window attribute (`strides` or `ksize`) of the form {1, h, w, 1}
// with 1 <= h, w <= kMaxWindow. InvalidArgument naming the attribute otherwise.
inline Result<std::vector<int64_t>> parse_nhwc_window(const AttrMap& attrs, const std::string& name) {
  auto v = attrs.get<std::vector<int64_t>>(name);
  if (!v.ok()) return InvalidArgument("needs a 4-element int list attribute '" + name + "'");
  if (v->size() != 4)
    return InvalidArgument("attribute '" + name + "' must have 4 elements {1, h, w, 1}, got " +
                           std::to_string(v->size()));
  if ((*v)[0] != 1 || (*v)[3] != 1)
    return InvalidArgument("attribute '" + name + "' must be 1 in the batch and depth dimensions, got {" +
                           std::to_string((*v)[0]) + ", " + std::to_string((*v)[1]) + ", " +
                           std::to_string((*v)[2]) + ", " + std::to_string((*v)[3]) + "}");
  if ((*v)[1] < 1 || (*v)[2] < 1)
    return InvalidArgument("attribute '" + name + "' must be positive, got {1, " + std::to_string((*v)[1]) +
                           ", " + std::to_string((*v)[2]) + ", 1}");
  if ((*v)[1] > kMaxWindow || (*v)[2] > kMaxWindow)
    return InvalidArgument("attribute '" + name + "' must be at most 2^31-1, got {1, " + std::to_string((*v)[1]) +
                           ", " + std::to_string((*v)[2]) + ", 1}");
  return *v;
}

// Output size and padding of one spatial dimension of a convolution or pooling window.
struct WindowDim {
  int64_t out = -1;       // -1 when the input size is unknown
  int64_t pad_before = 0;  // rows/cols of implicit padding before the first input element
  int64_t pad_after = 0;   // ... and after the last
};

// TensorFlow's rule for input size `in` (-1 = unknown), window `k` and stride `s`:
//   VALID: out = (in - k) / s + 1, no padding; InvalidArgument when k > in.
//   SAME:  out = ceil(in / s); pad_total = max((out - 1) * s + k - in, 0), split with the
//          smaller half before (pad_before = pad_total / 2).
// InvalidArgument when k or s is outside [1, kMaxWindow] (a filter's dims come from a tensor, not
// an attribute) or the padding does not fit in int64; no step can overflow. `what` names the
// dimension in the error, e.g. "height".
inline Result<WindowDim> compute_window(int64_t in, int64_t k, int64_t s, Padding p, const char* what) {
  WindowDim w;
  if (k < 1 || s < 1 || k > kMaxWindow || s > kMaxWindow)
    return InvalidArgument(std::string("window ") + what + " " + std::to_string(k) + " and stride " +
                           std::to_string(s) + " must be in [1, 2^31-1]");
  if (in < 0) return w;
  if (p == Padding::kValid) {
    if (k > in)
      return InvalidArgument(std::string("window ") + what + " " + std::to_string(k) + " exceeds the input " +
                             what + " " + std::to_string(in) + " with VALID padding");
    w.out = (in - k) / s + 1;
    return w;
  }
  w.out = in / s + (in % s != 0 ? 1 : 0);
  // (out - 1) * s <= in - 1 + s - 1 and k <= 2^31: below 2^63 for every in a tensor can have.
  int64_t span;
  if (!checked_mul(w.out - 1, s, &span) || !checked_add(span, k, &span))
    return InvalidArgument(std::string("the ") + what + " padding of input " + std::to_string(in) + ", window " +
                           std::to_string(k) + " and stride " + std::to_string(s) + " overflows int64");
  const int64_t total = std::max<int64_t>(span - in, 0);
  w.pad_before = total / 2;
  w.pad_after = total - w.pad_before;
  return w;
}

}  // namespace actorflow
