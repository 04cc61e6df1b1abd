// CPU kernels of graph/ops_indexing.cc: Gather, UnsortedSegmentSum, Concat, ConcatPart, Slice,
// SliceGrad, L2Loss, Split, Dropout, SparseSoftmaxCrossEntropyWithLogits, and of AvgPool and
// AvgPoolGrad (graph/ops_nn.cc); Sigmoid and Tanh are elementwise (device/cpu/math_kernels.cc).
// The copying kernels move bytes (any dtype); run-time shapes and indices are checked and errors
// name the node.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/checked_math.h"
#include "device/cpu/elementwise.h"
#include "device/kernel.h"
#include "device/window_plan.h"
#include "graph/shape_util.h"

namespace actorflow {
namespace {

using cpu::dispatch;
using cpu::FloatTypes;
using cpu::NumericTypes;
using cpu::TypeList;
using IndexTypes = TypeList<int32_t, int64_t>;

// Product of dims [from, to) of `s`.
int64_t span(const Shape& s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; ++i) n *= s.dim(i);
  return n;
}

// Gather(params, indices): row indices[i] of params to row i of the output.
class GatherKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& p = ctx.input(0);
    const Tensor& ids = ctx.input(1);
    if (p.shape().rank() < 1) return ctx.invalid_argument("params must have rank >= 1, got a scalar");
    const bool drop_negatives = ctx.attrs().get_or<bool>("drop_negatives", false);
    const int64_t rows = p.shape().dim(0);
    std::vector<int64_t> dims = ids.shape().dims();
    for (int i = 1; i < p.shape().rank(); ++i) dims.push_back(p.shape().dim(i));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, p.dtype(), Shape(dims)));
    const size_t row_bytes = static_cast<size_t>(span(p.shape(), 1, p.shape().rank())) * dtype_size(p.dtype());
    const char* src = static_cast<const char*>(p.raw_data());
    char* dst = static_cast<char*>(out->raw_data());
    return dispatch(IndexTypes{}, ids.dtype(), ctx, [&](auto tag) -> Status {
      using I = decltype(tag);
      const I* id = ids.data<I>();
      for (int64_t i = 0, n = ids.num_elements(); i < n; ++i) {
        const int64_t r = static_cast<int64_t>(id[i]);
        char* to = dst + static_cast<size_t>(i) * row_bytes;
        if (r < 0 && drop_negatives) {
          std::memset(to, 0, row_bytes);
          continue;
        }
        if (r < 0 || r >= rows)
          return ctx.invalid_argument("indices[" + std::to_string(i) + "] = " + std::to_string(r) +
                                      " is not in [0, " + std::to_string(rows) + ")");
        if (row_bytes) std::memcpy(to, src + static_cast<size_t>(r) * row_bytes, row_bytes);
      }
      return Status::OK();
    });
  }
};

// Reads a scalar or one-element int32/int64 tensor.
Result<int64_t> read_count(const Tensor& t) {
  if (t.num_elements() != 1) return InvalidArgument("num_segments must have one element, got " + t.shape().to_string());
  if (t.dtype() == DType::kInt32) return static_cast<int64_t>(t.data<int32_t>()[0]);
  if (t.dtype() == DType::kInt64) return t.data<int64_t>()[0];
  return InvalidArgument("num_segments must be int32 or int64");
}

// Sums the slices of `d` (segment_ids `ids` a prefix of its shape) into output 0 of shape
// [count] + d.shape[ids.rank:]. Negative ids are dropped when `drop_negative`, else an error; ids
// >= count are an error naming `what`.
Status segment_sum(OpKernelContext& ctx, const Tensor& d, const Tensor& ids, int64_t count, bool drop_negative,
                   const char* what) {
  if (count < 0) return ctx.invalid_argument("the number of rows must be >= 0, got " + std::to_string(count));
  const int ir = ids.shape().rank();
  bool prefix = ir <= d.shape().rank();
  for (int i = 0; prefix && i < ir; ++i) prefix = ids.shape().dim(i) == d.shape().dim(i);
  if (!prefix)
    return ctx.invalid_argument(std::string(what) + " " + ids.shape().to_string() + " must be a prefix of the values' shape " +
                                d.shape().to_string());
  std::vector<int64_t> dims{count};
  for (int i = ir; i < d.shape().rank(); ++i) dims.push_back(d.shape().dim(i));
  const int64_t inner = span(d.shape(), ir, d.shape().rank());
  return dispatch(NumericTypes{}, d.dtype(), ctx, [&](auto tag) -> Status {
    using T = decltype(tag);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, d.dtype(), Shape(dims)));
    T* o = out->data<T>();
    std::fill(o, o + out->num_elements(), T(0));
    const T* x = d.data<T>();
    return dispatch(IndexTypes{}, ids.dtype(), ctx, [&](auto itag) -> Status {
      using I = decltype(itag);
      const I* id = ids.data<I>();
      for (int64_t i = 0, n = ids.num_elements(); i < n; ++i) {
        const int64_t seg = static_cast<int64_t>(id[i]);
        if (seg < 0 && drop_negative) continue;  // dropped, as TensorFlow does
        if (seg < 0 || seg >= count)
          return ctx.invalid_argument(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(seg) +
                                      (drop_negative ? " is not below num_segments " + std::to_string(count)
                                                     : " is not in [0, " + std::to_string(count) + ")"));
        T* row = o + seg * inner;
        const T* in = x + i * inner;
        for (int64_t k = 0; k < inner; ++k) row[k] = functors::AddF()(row[k], in[k]);
      }
      return Status::OK();
    });
  });
}

// UnsortedSegmentSum(data, segment_ids, num_segments).
class SegmentSumKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    auto count = read_count(ctx.input(2));
    if (!count.ok()) return ctx.invalid_argument(count.status().message());
    return segment_sum(ctx, ctx.input(0), ctx.input(1), *count, /*drop_negative=*/true, "segment_ids");
  }
};

// IndexedSlices(indices, values, dense_shape): the dense tensor (only when a consumer needs it).
class IndexedSlicesKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& ids = ctx.input(0);
    const Tensor& values = ctx.input(1);
    const Tensor& shape = ctx.input(2);
    if (ids.shape().rank() != 1 || shape.dtype() != DType::kInt64 || shape.num_elements() != values.shape().rank() ||
        values.shape().rank() < 1)
      return ctx.invalid_argument("indices " + ids.shape().to_string() + ", values " + values.shape().to_string() +
                                  " and dense_shape " + shape.shape().to_string() + " do not describe rows of a tensor");
    for (int i = 1; i < values.shape().rank(); ++i)
      if (shape.data<int64_t>()[i] != values.shape().dim(i))
        return ctx.invalid_argument("values " + values.shape().to_string() + " are not rows of a tensor of shape " +
                                    int_list_to_string(std::vector<int64_t>(shape.data<int64_t>(),
                                                                            shape.data<int64_t>() + shape.num_elements())));
    return segment_sum(ctx, values, ids, shape.data<int64_t>()[0], /*drop_negative=*/false, "indices");
  }
};

// The shapes of values[first..] (checked to concatenate along `axis`) and where each starts.
struct ConcatLayout {
  int axis = 0;
  int64_t outer = 1;                 // product of dims before axis
  std::vector<size_t> chunk_bytes;   // per value: its dims from axis on, in bytes
  size_t out_chunk = 0;              // the sum: one outer row of the result, in bytes
  std::vector<int64_t> out_dims;
};

Result<ConcatLayout> concat_layout(const OpKernelContext& ctx, int first, int64_t axis) {
  const Tensor& v0 = ctx.input(first);
  const int rank = v0.shape().rank();
  if (rank == 0) return InvalidArgument("cannot concatenate scalars");
  AF_ASSIGN_OR_RETURN(int ax, normalize_axis(axis, rank));
  ConcatLayout l;
  l.axis = ax;
  l.outer = span(v0.shape(), 0, ax);
  l.out_dims = v0.shape().dims();
  l.out_dims[static_cast<size_t>(ax)] = 0;
  const size_t es = dtype_size(v0.dtype());
  for (int i = first; i < ctx.num_inputs(); ++i) {
    const Tensor& v = ctx.input(i);
    bool ok = v.dtype() == v0.dtype() && v.shape().rank() == rank;
    for (int d = 0; ok && d < rank; ++d) ok = d == ax || v.shape().dim(d) == v0.shape().dim(d);
    if (!ok)
      return InvalidArgument("values[" + std::to_string(i - first) + "] " + v.shape().to_string() + " (" +
                             dtype_name(v.dtype()) + ") cannot be concatenated with values[0] " +
                             v0.shape().to_string() + " (" + dtype_name(v0.dtype()) + ") along axis " +
                             std::to_string(ax));
    // Each value's dims are a valid tensor's; their sums across values are checked.
    if (!checked_add(l.out_dims[static_cast<size_t>(ax)], v.shape().dim(ax), &l.out_dims[static_cast<size_t>(ax)]))
      return InvalidArgument("the concatenated dim " + std::to_string(ax) + " overflows int64");
    l.chunk_bytes.push_back(static_cast<size_t>(span(v.shape(), ax, rank)) * es);
    if (!checked_add_size(l.out_chunk, l.chunk_bytes.back(), &l.out_chunk))
      return InvalidArgument("the concatenation's rows overflow size_t");
  }
  return l;
}

class ConcatKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    if (ctx.num_inputs() < 1) return ctx.invalid_argument("Concat needs at least one input");
    auto l = concat_layout(ctx, 0, ctx.attrs().get_or<int64_t>("axis", 0));
    if (!l.ok()) return ctx.invalid_argument(l.status().message());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, ctx.input(0).dtype(), Shape(l->out_dims)));
    char* o = static_cast<char*>(out->raw_data());
    for (int64_t r = 0; r < l->outer; ++r) {
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        const size_t c = l->chunk_bytes[static_cast<size_t>(i)];
        if (c) std::memcpy(o, static_cast<const char*>(ctx.input(i).raw_data()) + static_cast<size_t>(r) * c, c);
        o += c;
      }
    }
    return Status::OK();
  }
};

// ConcatPart(dy, values..., attrs axis, index).
class ConcatPartKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const int64_t index = ctx.attrs().get_or<int64_t>("index", -1);
    if (index < 0 || index >= ctx.num_inputs() - 1)
      return ctx.invalid_argument("index " + std::to_string(index) + " names no concatenated value");
    auto l = concat_layout(ctx, 1, ctx.attrs().get_or<int64_t>("axis", 0));
    if (!l.ok()) return ctx.invalid_argument(l.status().message());
    const Tensor& dy = ctx.input(0);
    if (dy.dtype() != ctx.input(1).dtype() || dy.shape() != Shape(l->out_dims))
      return ctx.invalid_argument("gradient " + dy.shape().to_string() + " is not the shape of the concatenation " +
                                  Shape(l->out_dims).to_string());
    const Tensor& part = ctx.input(static_cast<int>(index) + 1);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, dy.dtype(), part.shape()));
    size_t offset = 0;
    for (int64_t i = 0; i < index; ++i) offset += l->chunk_bytes[static_cast<size_t>(i)];
    const size_t c = l->chunk_bytes[static_cast<size_t>(index)];
    const char* src = static_cast<const char*>(dy.raw_data());
    char* o = static_cast<char*>(out->raw_data());
    for (int64_t r = 0; r < l->outer && c; ++r)
      std::memcpy(o + static_cast<size_t>(r) * c, src + static_cast<size_t>(r) * l->out_chunk + offset, c);
    return Status::OK();
  }
};

// The box [begin, begin + size) of a tensor of shape `full` (size -1 resolved), checked.
Result<std::vector<int64_t>> slice_box(const Shape& full, const std::vector<int64_t>& begin,
                                       const std::vector<int64_t>& size) {
  if (begin.size() != size.size() || static_cast<int>(begin.size()) != full.rank())
    return InvalidArgument("begin " + int_list_to_string(begin) + " and size " + int_list_to_string(size) +
                           " must both have one entry per dim of " + full.to_string());
  std::vector<int64_t> out(begin.size());
  for (size_t i = 0; i < begin.size(); ++i) {
    const int64_t dim = full.dim(static_cast<int>(i));
    // begin in [0, dim] first: then dim - begin cannot overflow, and n <= dim - begin is the
    // overflow-free form of begin + n <= dim.
    if (begin[i] < 0 || begin[i] > dim)
      return InvalidArgument("slice begin " + int_list_to_string(begin) + " size " + int_list_to_string(size) +
                             " does not fit in " + full.to_string());
    const int64_t n = size[i] == -1 ? dim - begin[i] : size[i];
    if (n < 0 || n > dim - begin[i])
      return InvalidArgument("slice begin " + int_list_to_string(begin) + " size " + int_list_to_string(size) +
                             " does not fit in " + full.to_string());
    out[i] = n;
  }
  return out;
}

// Copies the box `box` at `begin` between a tensor of shape `full` and a dense one of shape
// `box`: from full into dense when `gather`, else from dense into full. Bytes; any dtype.
void copy_box(const Shape& full, const std::vector<int64_t>& begin, const std::vector<int64_t>& box, size_t es,
              char* full_data, char* dense, bool gather) {
  const int rank = full.rank();
  int64_t total = 1;
  for (int64_t b : box) total *= b;
  if (total == 0) return;
  if (rank == 0) {
    if (gather) std::memcpy(dense, full_data, es);
    else std::memcpy(full_data, dense, es);
    return;
  }
  // Strides of `full` in elements; the innermost dim is copied as one run.
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1);
  for (int i = rank - 2; i >= 0; --i) stride[static_cast<size_t>(i)] = stride[static_cast<size_t>(i) + 1] * full.dim(i + 1);
  const size_t run = static_cast<size_t>(box.back()) * es;
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (int64_t done = 0; done < total; done += box.back()) {
    int64_t at = 0;
    for (int i = 0; i < rank; ++i) at += (begin[static_cast<size_t>(i)] + idx[static_cast<size_t>(i)]) * stride[static_cast<size_t>(i)];
    char* f = full_data + static_cast<size_t>(at) * es;
    char* d = dense + static_cast<size_t>(done) * es;
    if (gather) std::memcpy(d, f, run);
    else std::memcpy(f, d, run);
    for (int i = rank - 2; i >= 0; --i) {
      if (++idx[static_cast<size_t>(i)] < box[static_cast<size_t>(i)]) break;
      idx[static_cast<size_t>(i)] = 0;
    }
  }
}

class SliceKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const auto begin = ctx.attrs().get_or<std::vector<int64_t>>("begin", {});
    auto box = slice_box(x.shape(), begin, ctx.attrs().get_or<std::vector<int64_t>>("size", {}));
    if (!box.ok()) return ctx.invalid_argument(box.status().message());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), Shape(*box)));
    copy_box(x.shape(), begin, *box, dtype_size(x.dtype()), const_cast<char*>(static_cast<const char*>(x.raw_data())),
             static_cast<char*>(out->raw_data()), /*gather=*/true);
    return Status::OK();
  }
};

class SliceGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const auto begin = ctx.attrs().get_or<std::vector<int64_t>>("begin", {});
    auto box = slice_box(x.shape(), begin, ctx.attrs().get_or<std::vector<int64_t>>("size", {}));
    if (!box.ok()) return ctx.invalid_argument(box.status().message());
    if (dy.dtype() != x.dtype() || dy.shape() != Shape(*box))
      return ctx.invalid_argument("gradient " + dy.shape().to_string() + " is not the slice's shape " +
                                  Shape(*box).to_string());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), x.shape()));
    if (out->bytes()) std::memset(out->raw_data(), 0, out->bytes());
    copy_box(x.shape(), begin, *box, dtype_size(x.dtype()), static_cast<char*>(out->raw_data()),
             const_cast<char*>(static_cast<const char*>(dy.raw_data())), /*gather=*/false);
    return Status::OK();
  }
};

// L2Loss(x) = sum(x^2) / 2, accumulated in double.
class L2LossKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    return dispatch(FloatTypes{}, x.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), Shape{}));
      const T* a = x.data<T>();
      double sum = 0;
      for (int64_t i = 0, n = x.num_elements(); i < n; ++i) sum += static_cast<double>(a[i]) * static_cast<double>(a[i]);
      out->data<T>()[0] = static_cast<T>(sum / 2);
      return Status::OK();
    });
  }
};

// Split(x, attrs axis, num_split): equal parts along axis.
class SplitKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t parts = ctx.attrs().get_or<int64_t>("num_split", 1);
    if (x.shape().rank() == 0) return ctx.invalid_argument("cannot split a scalar");
    if (parts < 1 || parts > ctx.node().num_outputs())
      return ctx.invalid_argument("num_split " + std::to_string(parts) + " must be in [1, " +
                                  std::to_string(ctx.node().num_outputs()) + "] (the node's outputs)");
    auto ax = normalize_axis(ctx.attrs().get_or<int64_t>("axis", 0), x.shape().rank());
    if (!ax.ok()) return ctx.invalid_argument(ax.status().message());
    const int64_t d = x.shape().dim(*ax);
    if (parts < 1 || d % parts != 0)
      return ctx.invalid_argument("dim " + std::to_string(*ax) + " of " + x.shape().to_string() +
                                  " does not split into " + std::to_string(parts) + " equal parts");
    std::vector<int64_t> dims = x.shape().dims();
    dims[static_cast<size_t>(*ax)] = d / parts;
    const int64_t outer = span(x.shape(), 0, *ax);
    const size_t chunk = static_cast<size_t>(span(Shape(dims), *ax, x.shape().rank())) * dtype_size(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    for (int64_t p = 0; p < parts; ++p) {
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(static_cast<int>(p), x.dtype(), Shape(dims)));
      char* o = static_cast<char*>(out->raw_data());
      for (int64_t r = 0; r < outer && chunk; ++r)
        std::memcpy(o + static_cast<size_t>(r) * chunk, src + (static_cast<size_t>(r) * parts + static_cast<size_t>(p)) * chunk,
                    chunk);
    }
    return Status::OK();
  }
};

// A uniform double in [0, 1) from (seed, run, element): splitmix64 of their mix. Pure.
double uniform_at(uint64_t seed, uint64_t run, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ (run + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ i * 0x94D049BB133111EBull;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

// Dropout(x, attrs rate, seed) -> (y, scale). Each run of the node draws the next mask of the
// seed's sequence (the kernel counts its runs; concurrent runs each take their own number).
class DropoutKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const double rate = ctx.attrs().get_or<double>("rate", 0.5);
    if (!(rate >= 0 && rate < 1)) return ctx.invalid_argument("rate must be in [0, 1), got " + std::to_string(rate));
    const uint64_t seed = static_cast<uint64_t>(ctx.attrs().get_or<int64_t>("seed", 0));
    const uint64_t run = runs_.fetch_add(1, std::memory_order_relaxed);
    return dispatch(FloatTypes{}, x.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.shape()));
      AF_ASSIGN_OR_RETURN(Tensor * scale, ctx.allocate_output(1, x.dtype(), x.shape()));
      const T keep = static_cast<T>(1.0 / (1.0 - rate));
      const T* a = x.data<T>();
      T* o = y->data<T>();
      T* m = scale->data<T>();
      for (int64_t i = 0, n = x.num_elements(); i < n; ++i) {
        m[i] = uniform_at(seed, run, static_cast<uint64_t>(i)) < rate ? T(0) : keep;
        o[i] = a[i] * m[i];
      }
      return Status::OK();
    });
  }

 private:
  std::atomic<uint64_t> runs_{0};
};

// SparseSoftmaxCrossEntropyWithLogits(logits [b, c] f32, labels [b] int) -> (loss, backprop).
class SparseXentKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.input(1);
    if (x.dtype() != DType::kFloat32) return ctx.invalid_argument("logits must be float32");
    if (x.shape().rank() != 2 || y.shape().rank() != 1 || y.shape().dim(0) != x.shape().dim(0))
      return ctx.invalid_argument("logits " + x.shape().to_string() + " must be [batch, classes] and labels " +
                                  y.shape().to_string() + " [batch]");
    const int64_t rows = x.shape().dim(0), c = x.shape().dim(1);
    AF_ASSIGN_OR_RETURN(Tensor * loss, ctx.allocate_output(0, DType::kFloat32, Shape{rows}));
    AF_ASSIGN_OR_RETURN(Tensor * back, ctx.allocate_output(1, DType::kFloat32, x.shape()));
    return dispatch(IndexTypes{}, y.dtype(), ctx, [&](auto tag) -> Status {
      using I = decltype(tag);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t label = static_cast<int64_t>(y.data<I>()[r]);
        if (label < 0 || label >= c)
          return ctx.invalid_argument("labels[" + std::to_string(r) + "] = " + std::to_string(label) +
                                      " is not in [0, " + std::to_string(c) + ")");
        const float* xr = x.data<float>() + r * c;
        float* br = back->data<float>() + r * c;
        float m = xr[0];
        for (int64_t j = 1; j < c; ++j) m = std::max(m, xr[j]);
        double sum = 0;
        for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(xr[j] - m));
        const double log_sum = std::log(sum);
        for (int64_t j = 0; j < c; ++j)
          br[j] = static_cast<float>(std::exp(static_cast<double>(xr[j] - m) - log_sum)) - (j == label ? 1.f : 0.f);
        loss->data<float>()[r] = static_cast<float>(log_sum - static_cast<double>(xr[label] - m));
      }
      return Status::OK();
    });
  }
};

// AvgPool / AvgPoolGrad over NHWC (float32 and float64): every window's mean over the input
// elements it covers; the gradient spreads each window's grad evenly over them.
template <bool kGrad>
class AvgPoolKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);  // AvgPoolGrad: the original input (its shape)
    auto g = pool_geometry(ctx.attrs(), x.shape());
    if (!g.ok()) return ctx.invalid_argument(g.status().message());
    const Shape pooled{g->n, g->wh.out, g->ww.out, g->c};
    const Tensor& src = kGrad ? ctx.input(1) : x;
    if (kGrad && src.shape() != pooled)
      return ctx.invalid_argument("grad " + src.shape().to_string() + " is not the pooled shape " + pooled.to_string());
    return dispatch(FloatTypes{}, src.dtype(), ctx, [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, src.dtype(), kGrad ? x.shape() : pooled));
      T* o = out->data<T>();
      const T* in = src.data<T>();
      if (kGrad) std::fill(o, o + out->num_elements(), T(0));
      for (int64_t ni = 0; ni < g->n; ++ni)
        for (int64_t oh = 0; oh < g->wh.out; ++oh)
          for (int64_t ow = 0; ow < g->ww.out; ++ow) {
            const int64_t h0 = std::max<int64_t>(oh * g->sh - g->wh.pad_before, 0);
            const int64_t w0 = std::max<int64_t>(ow * g->sw - g->ww.pad_before, 0);
            const int64_t h1 = std::min(oh * g->sh - g->wh.pad_before + g->kh, g->h);
            const int64_t w1 = std::min(ow * g->sw - g->ww.pad_before + g->kw, g->w);
            const int64_t count = std::max<int64_t>((h1 - h0) * (w1 - w0), 1);
            const int64_t pool_at = ((ni * g->wh.out + oh) * g->ww.out + ow) * g->c;
            for (int64_t ci = 0; ci < g->c; ++ci) {
              if (kGrad) {
                const T share = in[pool_at + ci] / static_cast<T>(count);
                for (int64_t hh = h0; hh < h1; ++hh)
                  for (int64_t ww = w0; ww < w1; ++ww) o[((ni * g->h + hh) * g->w + ww) * g->c + ci] += share;
              } else {
                T sum = 0;
                for (int64_t hh = h0; hh < h1; ++hh)
                  for (int64_t ww = w0; ww < w1; ++ww) sum += in[((ni * g->h + hh) * g->w + ww) * g->c + ci];
                o[pool_at + ci] = sum / static_cast<T>(count);
              }
            }
          }
      return Status::OK();
    });
  }
};

// DynamicPartition(data, partitions, attr num_partitions).
class DynamicPartitionKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& d = ctx.input(0);
    const Tensor& p = ctx.input(1);
    const int64_t n = ctx.attrs().get_or<int64_t>("num_partitions", 1);
    if (n < 1 || n > ctx.node().num_outputs())
      return ctx.invalid_argument("num_partitions " + std::to_string(n) + " must be in [1, " +
                                  std::to_string(ctx.node().num_outputs()) + "] (the node's outputs)");
    const int pr = p.shape().rank();
    bool prefix = pr <= d.shape().rank();
    for (int i = 0; prefix && i < pr; ++i) prefix = p.shape().dim(i) == d.shape().dim(i);
    if (!prefix || p.dtype() != DType::kInt32)
      return ctx.invalid_argument("partitions " + p.shape().to_string() + " (" + dtype_name(p.dtype()) +
                                  ") must be int32 and a prefix of data's shape " + d.shape().to_string());
    const int32_t* part = p.data<int32_t>();
    const int64_t m = p.num_elements();
    std::vector<int64_t> count(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < m; ++j) {
      if (part[j] < 0 || part[j] >= n)
        return ctx.invalid_argument("partitions[" + std::to_string(j) + "] = " + std::to_string(part[j]) +
                                    " is not in [0, " + std::to_string(n) + ")");
      ++count[static_cast<size_t>(part[j])];
    }
    const size_t slice = static_cast<size_t>(span(d.shape(), pr, d.shape().rank())) * dtype_size(d.dtype());
    std::vector<char*> dst(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> dims{count[static_cast<size_t>(i)]};
      for (int k = pr; k < d.shape().rank(); ++k) dims.push_back(d.shape().dim(k));
      AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(static_cast<int>(i), d.dtype(), Shape(dims)));
      dst[static_cast<size_t>(i)] = static_cast<char*>(out->raw_data());
    }
    const char* src = static_cast<const char*>(d.raw_data());
    if (slice == 0) return Status::OK();
    for (int64_t j = 0; j < m; ++j) {
      char*& to = dst[static_cast<size_t>(part[j])];
      std::memcpy(to, src + static_cast<size_t>(j) * slice, slice);
      to += slice;
    }
    return Status::OK();
  }
};

// DynamicStitch(indices..., data...).
class DynamicStitchKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const int n = ctx.num_inputs() / 2;
    if (n < 1 || ctx.num_inputs() != 2 * n) return ctx.invalid_argument("needs N index tensors and N data tensors");
    const Tensor& d0 = ctx.input(n);
    const int r0 = ctx.input(0).shape().rank();
    if (r0 > d0.shape().rank())
      return ctx.invalid_argument("indices[0] " + ctx.input(0).shape().to_string() + " must be a prefix of data[0]'s shape " +
                                  d0.shape().to_string());
    std::vector<int64_t> row(d0.shape().dims().begin() + r0, d0.shape().dims().end());
    int64_t rows = 0;
    for (int m = 0; m < n; ++m) {
      const Tensor& ind = ctx.input(m);
      const Tensor& d = ctx.input(n + m);
      const int r = ind.shape().rank();
      bool ok = ind.dtype() == DType::kInt32 && d.dtype() == d0.dtype() && r <= d.shape().rank();
      for (int i = 0; ok && i < r; ++i) ok = ind.shape().dim(i) == d.shape().dim(i);
      ok = ok && std::vector<int64_t>(d.shape().dims().begin() + (ok ? r : 0), d.shape().dims().end()) == row;
      if (!ok)
        return ctx.invalid_argument("indices[" + std::to_string(m) + "] " + ind.shape().to_string() + " (" +
                                    dtype_name(ind.dtype()) + ") and data[" + std::to_string(m) + "] " +
                                    d.shape().to_string() + " do not match (int32 indices, a prefix of the data's "
                                    "shape, rows as data[0]'s)");
      const int32_t* id = ind.data<int32_t>();
      for (int64_t i = 0, k = ind.num_elements(); i < k; ++i) {
        if (id[i] < 0)
          return ctx.invalid_argument("indices[" + std::to_string(m) + "][" + std::to_string(i) + "] = " +
                                      std::to_string(id[i]) + " is negative");
        rows = std::max<int64_t>(rows, int64_t{id[i]} + 1);
      }
    }
    std::vector<int64_t> dims{rows};
    dims.insert(dims.end(), row.begin(), row.end());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, d0.dtype(), Shape(dims)));
    const size_t slice = static_cast<size_t>(span(Shape(dims), 1, static_cast<int>(dims.size()))) * dtype_size(d0.dtype());
    char* o = static_cast<char*>(out->raw_data());
    if (slice == 0) return Status::OK();
    std::memset(o, 0, slice * static_cast<size_t>(rows));
    for (int m = 0; m < n; ++m) {
      const int32_t* id = ctx.input(m).data<int32_t>();
      const char* src = static_cast<const char*>(ctx.input(n + m).raw_data());
      for (int64_t i = 0, k = ctx.input(m).num_elements(); i < k; ++i)
        std::memcpy(o + static_cast<size_t>(id[i]) * slice, src + static_cast<size_t>(i) * slice, slice);
    }
    return Status::OK();
  }
};

// PartitionIds(ids, attrs num_shards, num_rows, strategy) -> (shard, local id, position), with
// TensorFlow's partition arithmetic (embedding_ops.py).
class PartitionIdsKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    const Tensor& ids = ctx.input(0);
    const int64_t n = ctx.attrs().get_or<int64_t>("num_shards", 1);
    const int64_t rows = ctx.attrs().get_or<int64_t>("num_rows", 0);
    const bool mod = ctx.attrs().get_or<std::string>("strategy", "mod") == "mod";
    if (n < 1 || rows < n) return ctx.invalid_argument("cannot spread " + std::to_string(rows) + " rows over " +
                                                       std::to_string(n) + " shards");
    AF_ASSIGN_OR_RETURN(Tensor * shard, ctx.allocate_output(0, DType::kInt32, ids.shape()));
    AF_ASSIGN_OR_RETURN(Tensor * local, ctx.allocate_output(1, ids.dtype(), ids.shape()));
    AF_ASSIGN_OR_RETURN(Tensor * pos, ctx.allocate_output(2, DType::kInt32, ids.shape()));
    const int64_t per = rows / n, extras = rows % n;
    int32_t* sh = shard->data<int32_t>();
    int32_t* ps = pos->data<int32_t>();
    if (ids.num_elements() > std::numeric_limits<int32_t>::max())
      return ctx.invalid_argument("more than 2^31 ids in one lookup");
    return dispatch(IndexTypes{}, ids.dtype(), ctx, [&](auto tag) -> Status {
      using I = decltype(tag);
      const I* id = ids.data<I>();
      I* lo = local->data<I>();
      for (int64_t i = 0, k = ids.num_elements(); i < k; ++i) {
        const int64_t v = static_cast<int64_t>(id[i]);
        if (v < 0 || v >= rows)
          return ctx.invalid_argument("ids[" + std::to_string(i) + "] = " + std::to_string(v) + " is not in [0, " +
                                      std::to_string(rows) + ")");
        int64_t p, r;
        // Overflow-free forms: rows <= INT64_MAX, so per + 1 overflows only when n == 1 (then
        // extras == 0), and extras * (per + 1) is computed only once known to be <= v.
        if (mod) {
          p = v % n;
          r = v / n;
        } else if (extras > 0 && v / (per + 1) < extras) {  // the first `extras` shards hold per + 1 rows
          p = v / (per + 1);
          r = v % (per + 1);
        } else {
          const int64_t first = extras > 0 ? extras * (per + 1) : 0;
          p = extras + (v - first) / per;
          r = (v - first) % per;
        }
        sh[i] = static_cast<int32_t>(p);
        lo[i] = static_cast<I>(r);
        ps[i] = static_cast<int32_t>(i);
      }
      return Status::OK();
    });
  }
};

}  // namespace

void register_cpu_indexing_kernels(KernelRegistry& r) {
  r.add("Gather", "CPU", simple_factory<GatherKernel>());
  r.add("UnsortedSegmentSum", "CPU", simple_factory<SegmentSumKernel>());
  r.add("IndexedSlices", "CPU", simple_factory<IndexedSlicesKernel>());
  r.add("Concat", "CPU", simple_factory<ConcatKernel>());
  r.add("ConcatPart", "CPU", simple_factory<ConcatPartKernel>());
  r.add("Slice", "CPU", simple_factory<SliceKernel>());
  r.add("SliceGrad", "CPU", simple_factory<SliceGradKernel>());
  r.add("L2Loss", "CPU", simple_factory<L2LossKernel>());
  r.add("Split", "CPU", simple_factory<SplitKernel>());
  r.add("Dropout", "CPU", simple_factory<DropoutKernel>());
  r.add("SparseSoftmaxCrossEntropyWithLogits", "CPU", simple_factory<SparseXentKernel>());
  r.add("DynamicPartition", "CPU", simple_factory<DynamicPartitionKernel>());
  r.add("DynamicStitch", "CPU", simple_factory<DynamicStitchKernel>());
  r.add("PartitionIds", "CPU", simple_factory<PartitionIdsKernel>());
  r.add("AvgPool", "CPU", simple_factory<AvgPoolKernel<false>>());
  r.add("AvgPoolGrad", "CPU", simple_factory<AvgPoolKernel<true>>());
}

}  // namespace actorflow
