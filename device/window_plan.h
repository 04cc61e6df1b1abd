// Geometry of the GPU window ops (Conv2D and its gradients, MaxPool and MaxPoolGrad) under
// TensorFlow's NHWC/HWIO layouts and SAME/VALID rules, plus the per-output max-pool window
// scan the CUDA kernels run. Kept out of the .cu files so the host tests check exactly the
// arithmetic the GPU uses.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "device/functors.h"  // AF_HOST_DEVICE, af_lowest
#include "graph/graph.h"
#include "graph/ops_nn_util.h"

namespace actorflow {

// One NHWC x HWIO convolution. cuDNN pads symmetrically, so the input it sees is h x w plus
// the odd SAME padding row/column at the end (ph x pw), padded by pad_before on both sides:
// (ph + 2 * wh.pad_before - fh) / sh + 1 == wh.out (likewise for the width).
struct ConvGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input
  int64_t fh = 0, fw = 0, k = 0;       // filter (its input depth is c)
  int64_t sh = 1, sw = 1;
  WindowDim wh, ww;                    // output size and padding per spatial dim
  int64_t ph = 0, pw = 0;              // the input size cuDNN sees
  bool asymmetric = false;             // ph != h or pw != w: the input needs a padded copy
};

// Reads attrs strides/padding and checks input [n,h,w,c] against filter [fh,fw,c,k].
// InvalidArgument naming what is wrong.
Result<ConvGeometry> conv_geometry(const AttrMap& attrs, const Shape& input, const Shape& filter);

// One NHWC max pooling (attrs ksize, strides, padding).
struct PoolGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0, kh = 1, kw = 1, sh = 1, sw = 1;
  WindowDim wh, ww;
};

Result<PoolGeometry> pool_geometry(const AttrMap& attrs, const Shape& input);

// For output element i (row-major over [n, wh.out, ww.out, c]): the input offset of the first
// maximum of its window in row-major window order (TensorFlow's tie-break), or -1 for an
// empty window; the maximum goes to *best_out.
template <class T>
AF_HOST_DEVICE int64_t pool_window_argmax(const T* x, const PoolGeometry& g, int64_t i, T* best_out) {
  int64_t t = i;
  const int64_t ci = t % g.c;
  t /= g.c;
  const int64_t ow = t % g.ww.out;
  t /= g.ww.out;
  const int64_t oh = t % g.wh.out;
  const int64_t ni = t / g.wh.out;
  const int64_t h0 = oh * g.sh - g.wh.pad_before, w0 = ow * g.sw - g.ww.pad_before;
  const int64_t h1 = h0 + g.kh < g.h ? h0 + g.kh : g.h, w1 = w0 + g.kw < g.w ? w0 + g.kw : g.w;
  int64_t best = -1;
  T best_v = functors::af_lowest<T>();
  for (int64_t hh = h0 > 0 ? h0 : 0; hh < h1; ++hh) {
    for (int64_t ww = w0 > 0 ? w0 : 0; ww < w1; ++ww) {
      const int64_t off = ((ni * g.h + hh) * g.w + ww) * g.c + ci;
      const T v = x[off];
      if (best < 0 || v > best_v) {
        best = off;
        best_v = v;
      }
    }
  }
  *best_out = best_v;
  return best;
}

// Filter layouts: TensorFlow's HWIO [fh, fw, c, k] and cuDNN's NHWC filter layout OHWI
// [k, fh, fw, c]. Each returns, for element i of the destination layout, the offset of the
// same filter element in the source layout.
AF_HOST_DEVICE inline int64_t ohwi_from_hwio(int64_t i, int64_t fh, int64_t fw, int64_t c, int64_t k) {
  const int64_t ci = i % c;
  i /= c;
  const int64_t wi = i % fw;
  i /= fw;
  const int64_t hi = i % fh;
  const int64_t o = i / fh;
  return ((hi * fw + wi) * c + ci) * k + o;
}
AF_HOST_DEVICE inline int64_t hwio_from_ohwi(int64_t i, int64_t fh, int64_t fw, int64_t c, int64_t k) {
  const int64_t o = i % k;
  i /= k;
  const int64_t ci = i % c;
  i /= c;
  const int64_t wi = i % fw;
  const int64_t hi = i / fw;
  return ((o * fh + hi) * fw + wi) * c + ci;
}

// Element i of the [n, h, w, c] corner at the origin of two NHWC buffers with spatial sizes
// (s_h, s_w) and (d_h, d_w): its offsets in the source and the destination (the padded-copy
// and crop kernels for asymmetric SAME padding).
AF_HOST_DEVICE inline void window_copy_offsets(int64_t i, int64_t h, int64_t w, int64_t c, int64_t s_h, int64_t s_w,
                                               int64_t d_h, int64_t d_w, int64_t* src, int64_t* dst) {
  const int64_t ci = i % c;
  i /= c;
  const int64_t wi = i % w;
  i /= w;
  const int64_t hi = i % h;
  const int64_t ni = i / h;
  *src = ((ni * s_h + hi) * s_w + wi) * c + ci;
  *dst = ((ni * d_h + hi) * d_w + wi) * c + ci;
}

}  // namespace actorflow
