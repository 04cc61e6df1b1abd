#include "device/window_plan.h"

#include <string>

namespace actorflow {

Result<ConvGeometry> conv_geometry(const AttrMap& attrs, const Shape& input, const Shape& filter) {
  if (input.rank() != 4) return InvalidArgument("input must be rank 4 (NHWC), got " + input.to_string());
  if (filter.rank() != 4) return InvalidArgument("filter must be rank 4 (HWIO), got " + filter.to_string());
  AF_ASSIGN_OR_RETURN(auto strides, parse_nhwc_window(attrs, "strides"));
  AF_ASSIGN_OR_RETURN(Padding pad, parse_padding(attrs));
  ConvGeometry g;
  g.n = input.dim(0);
  g.h = input.dim(1);
  g.w = input.dim(2);
  g.c = input.dim(3);
  g.fh = filter.dim(0);
  g.fw = filter.dim(1);
  g.k = filter.dim(3);
  if (filter.dim(2) != g.c)
    return InvalidArgument("input depth " + std::to_string(g.c) + " does not match the filter's input depth " +
                           std::to_string(filter.dim(2)) + " (input " + input.to_string() + ", filter " +
                           filter.to_string() + ")");
  if (g.fh < 1 || g.fw < 1) return InvalidArgument("filter " + filter.to_string() + " has an empty window");
  g.sh = strides[1];
  g.sw = strides[2];
  AF_ASSIGN_OR_RETURN(g.wh, compute_window(g.h, g.fh, g.sh, pad, "height"));
  AF_ASSIGN_OR_RETURN(g.ww, compute_window(g.w, g.fw, g.sw, pad, "width"));
  g.ph = g.h + (g.wh.pad_after - g.wh.pad_before);
  g.pw = g.w + (g.ww.pad_after - g.ww.pad_before);
  g.asymmetric = g.ph != g.h || g.pw != g.w;
  return g;
}

Result<PoolGeometry> pool_geometry(const AttrMap& attrs, const Shape& input) {
  if (input.rank() != 4) return InvalidArgument("input must be rank 4 (NHWC), got " + input.to_string());
  AF_ASSIGN_OR_RETURN(auto ksize, parse_nhwc_window(attrs, "ksize"));
  AF_ASSIGN_OR_RETURN(auto strides, parse_nhwc_window(attrs, "strides"));
  AF_ASSIGN_OR_RETURN(Padding pad, parse_padding(attrs));
  PoolGeometry g;
  g.n = input.dim(0);
  g.h = input.dim(1);
  g.w = input.dim(2);
  g.c = input.dim(3);
  g.kh = ksize[1];
  g.kw = ksize[2];
  g.sh = strides[1];
  g.sw = strides[2];
  AF_ASSIGN_OR_RETURN(g.wh, compute_window(g.h, g.kh, g.sh, pad, "height"));
  AF_ASSIGN_OR_RETURN(g.ww, compute_window(g.w, g.kw, g.sw, pad, "width"));
  return g;
}

}  // namespace actorflow
