// CPU kernels of the neural-network ops (graph/ops_nn.cc).
//
// MatMul, Conv2D (forward, backward data, backward weights) and MaxPool (forward, backward)
// run on oneDNN. Activations stay in TensorFlow's NHWC layout and filters in HWIO: the oneDNN
// memory descriptors describe those layouts directly (format tags nhwc / hwio), so inputs and
// outputs are never reordered. Filters alone may be reordered into a blocked layout when
// oneDNN's fastest convolution wants one (a copy of the small filter tensor per call).
//
// A node marked for bfloat16 mixed precision (graph/mixed_precision.h) converts its float32
// operands to bfloat16 on the way in (one reorder per operand per call, into a buffer the
// kernel keeps) and still writes float32; on CPUs without native bfloat16 the mark is ignored.
//
// Primitives are created on first use and cached per kernel instance, keyed by the input
// shapes, in a DnnlPrimitiveCache (device/cpu/dnnl_primitive_cache.h). The cache's mutex is
// held while a kernel runs its primitives, and guards the kernel's reorder buffers and
// scratchpad too, so a kernel is safe even if a caller runs it from several threads at once.
//
// Relu, BiasAdd, Softmax, SoftmaxCrossEntropyWithLogits, ReluGrad and BiasAddGrad are plain
// loops written for the auto-vectoriser. Every kernel is float32-only and says so, naming the
// op, for other dtypes.
#include "device/cpu/nn_kernels.h"

#include <dlfcn.h>
#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device/cpu/dnnl_primitive_cache.h"
#include "device/functors.h"
#include "device/kernel.h"
#include "graph/fusion.h"
#include "graph/mixed_precision.h"
#include "graph/ops_nn_util.h"

namespace actorflow {
namespace {

// AF_INTRA_OP_THREADS, else the first value of OMP_NUM_THREADS, else 1.
int default_intra_op_threads() {
  for (const char* var : {"AF_INTRA_OP_THREADS", "OMP_NUM_THREADS"}) {
    const char* env = std::getenv(var);
    if (!env || !*env) continue;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if ((*end == '\0' || *end == ',') && v >= 0 && v <= 4096) return static_cast<int>(v);
  }
  return 1;
}

std::atomic<int>& intra_op_setting() {
  static std::atomic<int> n(default_intra_op_threads());
  return n;
}

// Applies the intra-op setting to this thread's OpenMP team size before a oneDNN call. The
// OpenMP runtime is the one libdnnl links; it is looked up at run time so af_base needs no
// OpenMP flags (and a oneDNN built with another runtime simply ignores the setting).
void apply_intra_op_threads() {
  using SetFn = void (*)(int);
  static const SetFn set_fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local int applied = -1;
  const int want = intra_op_setting().load(std::memory_order_relaxed);
  if (!set_fn || want == applied) return;
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  set_fn(want > 0 ? want : std::max(hw, 1));
  applied = want;
}

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;
constexpr memory::data_type kBF16 = memory::data_type::bf16;

// Whether node `n` computes with bfloat16 operands (its kMixedBfloat16Attr, on a CPU that has
// them: without native bfloat16 oneDNN would emulate it, slower than float32).
bool wants_bf16(const Node& n) {
  return n.attrs.get_or<bool>(kMixedBfloat16Attr, false) && cpu_has_native_bfloat16();
}

// One CPU engine per process (oneDNN engines are thread-safe and costly to create).
dnnl::engine& cpu_engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

// One stream per thread: primitives may execute on any device-actor thread, and a oneDNN
// stream is not documented as safe for concurrent use. CPU streams are cheap.
dnnl::stream& cpu_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// Runs `f`, turning oneDNN's exceptions into a Status naming the op (no exceptions cross the API).
template <class F>
Status guarded(const OpKernelContext& ctx, F&& f) {
  apply_intra_op_threads();
  try {
    return f();
  } catch (const dnnl::error& e) {
    // Geometry oneDNN refuses (a peer's strides, windows, padding) is the caller's error.
    const Code code = e.status == dnnl_invalid_arguments ? Code::kInvalidArgument
                      : e.status == dnnl_unimplemented   ? Code::kUnimplemented
                                                         : Code::kInternal;
    return ctx.error(code, std::string("oneDNN: ") + e.what());
  } catch (const std::bad_alloc&) {
    return ctx.error(Code::kResourceExhausted, "out of host memory for oneDNN buffers");
  }
}

Status require_f32(const OpKernelContext& ctx, int i, const char* what) {
  DType t = ctx.input(i).dtype();
  if (t == DType::kFloat32) return Status::OK();
  return ctx.invalid_argument(std::string("CPU kernel supports float32 only, but ") + what + " is " + dtype_name(t));
}

Status require_rank(const OpKernelContext& ctx, int i, int rank, const char* what) {
  const Shape& s = ctx.input(i).shape();
  if (s.rank() == rank) return Status::OK();
  return ctx.invalid_argument(std::string(what) + " must be rank " + std::to_string(rank) + ", got shape " +
                              s.to_string());
}

// A 64-byte aligned host buffer that grows on demand (scratchpads, reordered filters).
class AlignedBuffer {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, rounded);
      if (!p) throw std::bad_alloc();
      data_.reset(p);
      size_ = rounded;
    }
    return data_.get();
  }

 private:
  struct Free { void operator()(void* p) const { std::free(p); } };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// A MatMul's or convolution's attributes: a user scratchpad and, with `relu` (kernels fused by
// graph/fusion.h), a ReLU post-op applied by oneDNN to each output block after the bias, while
// it is in registers.
dnnl::primitive_attr fused_attr(bool relu) {
  dnnl::primitive_attr a = user_scratchpad_attr();
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    a.set_post_ops(po);
  }
  return a;
}

// A fused kernel's bias (input 2): float32, rank 1, one value per output channel `channels`.
Status check_fused_bias(const OpKernelContext& ctx, int64_t channels) {
  AF_RETURN_IF_ERROR(require_f32(ctx, 2, "bias"));
  AF_RETURN_IF_ERROR(require_rank(ctx, 2, 1, "bias"));
  const int64_t nb = ctx.input(2).shape().dim(0);
  if (nb == channels) return Status::OK();
  return ctx.invalid_argument("bias of size " + std::to_string(nb) + " does not match the output's last dimension " +
                              std::to_string(channels));
}

// A fused kernel's result when its reduction is empty: each row of `out` is the bias, then the
// ReLU. Writes every element of `out` (whose last dimension is the bias's size).
void bias_relu_of_zero(Tensor* out, const Tensor& bias, bool relu) {
  const int64_t c = bias.num_elements();
  if (c == 0) return;
  float* o = out->data<float>();
  const float* b = bias.data<float>();
  const int64_t rows = out->num_elements() / c;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) o[r * c + j] = relu ? std::max(b[j], 0.f) : b[j];
}

memory::desc nhwc_md(const Shape& s, memory::data_type t = kF32) {
  return memory::desc({s.dim(0), s.dim(3), s.dim(1), s.dim(2)}, t, Tag::nhwc);
}
memory::desc hwio_md(const Shape& f) { return memory::desc({f.dim(3), f.dim(2), f.dim(0), f.dim(1)}, kF32, Tag::hwio); }

memory wrap(const memory::desc& md, const void* p) { return memory(md, cpu_engine(), const_cast<void*>(p)); }

// A memory of `md` in `buf` (grown as needed): scratchpads, reordered filters, workspaces.
memory buffer_memory(const memory::desc& md, AlignedBuffer& buf) { return wrap(md, buf.get(md.get_size())); }

// `user` in the layout and type `want`: `user` itself when they agree, else converted into
// `buf` by `reorder` (built on first need; the entry caches it). Used for filters in a blocked
// layout and for the bfloat16 copies of float32 operands.
memory staged(const memory::desc& want, memory user, std::optional<dnnl::reorder>& reorder,
              AlignedBuffer& buf) {
  if (want == user.get_desc()) return user;
  memory dst = buffer_memory(want, buf);
  if (!reorder) reorder.emplace(dnnl::reorder::primitive_desc(cpu_engine(), user.get_desc(), cpu_engine(), want));
  reorder->execute(cpu_stream(), user, dst);
  return dst;
}

// Runs `p` on this thread's stream and waits for it.
Status execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  p.execute(cpu_stream(), args);
  cpu_stream().wait();
  return Status::OK();
}

// What each single-primitive kernel caches per shape: the descriptor, the primitive and the
// reorders built on first need (filters into a blocked layout; float32 operands into bfloat16).
template <class Prim>
struct PrimEntry {
  typename Prim::primitive_desc pd;
  Prim prim;
  std::optional<dnnl::reorder> w_reorder, a_reorder, b_reorder;
};

template <class Prim>
PrimEntry<Prim> prim_entry(const typename Prim::primitive_desc& pd) {
  return PrimEntry<Prim>{pd, Prim(pd), std::nullopt, std::nullopt, std::nullopt};
}

// ---- MatMul ------------------------------------------------------------------------------

// A marked MatMul with a dimension below this stays float32: a classifier's last layer (the seed
// CNN's logits: 500 -> 10) and its gradients, whose cost is nothing next to the step's and whose
// rounding reaches the loss directly. Keras' mixed-precision guide keeps the last layer float32
// for the same reason; measured on the seed job, bfloat16 logits cost ~0.008 of test accuracy.
constexpr int64_t kBf16MinMatMulDim = 16;

class MatMulKernel : public OpKernel {
 public:
  // MatMul, or _FusedMatMul(a, b, bias) {fused_relu} (graph/fusion.h).
  explicit MatMulKernel(const Node& n)
      : OpKernel(n),
        ta_(n.attrs.get_or<bool>("transpose_a", false)),
        tb_(n.attrs.get_or<bool>("transpose_b", false)),
        bf16_(wants_bf16(n)),
        bias_(n.op == "_FusedMatMul"),
        relu_(bias_ && n.attrs.get_or<bool>(kFusedReluAttr, false)) {}

  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "a"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "b"));
    AF_RETURN_IF_ERROR(require_rank(ctx, 0, 2, "a"));
    AF_RETURN_IF_ERROR(require_rank(ctx, 1, 2, "b"));
    const Shape& as = ctx.input(0).shape();
    const Shape& bs = ctx.input(1).shape();
    const int64_t m = as.dim(ta_ ? 1 : 0), k = as.dim(ta_ ? 0 : 1);
    const int64_t kb = bs.dim(tb_ ? 1 : 0), n = bs.dim(tb_ ? 0 : 1);
    if (k != kb)
      return ctx.invalid_argument("inner dimensions " + std::to_string(k) + " and " + std::to_string(kb) + " differ");
    if (bias_) AF_RETURN_IF_ERROR(check_fused_bias(ctx, n));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, Shape{m, n}));
    if (m == 0 || n == 0) return Status::OK();
    if (k == 0) {  // every sum is empty
      if (bias_) bias_relu_of_zero(out, ctx.input(2), relu_);
      else std::memset(out->raw_data(), 0, out->bytes());
      return Status::OK();
    }
    return guarded(ctx, [&]() -> Status {
      return cache_.with({m, k, n}, [&] { return make_entry(m, k, n); }, [&](Entry& e) {
        memory a = staged(e.pd.src_desc(), wrap(operand_md(m, k, ta_), ctx.input(0).raw_data()), e.a_reorder, a_buf_);
        memory b = staged(e.pd.weights_desc(), wrap(operand_md(k, n, tb_), ctx.input(1).raw_data()), e.b_reorder, b_buf_);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a},
                                             {DNNL_ARG_WEIGHTS, b},
                                             {DNNL_ARG_DST, wrap(e.pd.dst_desc(), out->raw_data())},
                                             {DNNL_ARG_SCRATCHPAD, buffer_memory(e.pd.scratchpad_desc(), scratch_)}};
        if (bias_) args.emplace(DNNL_ARG_BIAS, wrap(e.pd.bias_desc(), ctx.input(2).raw_data()));
        return execute(e.prim, args);
      });
    });
  }

 private:
  using Entry = PrimEntry<dnnl::matmul>;

  // A rows x cols operand of type `t` in its tensor's layout (transposed: column-major).
  static memory::desc operand_md(int64_t rows, int64_t cols, bool transposed, memory::data_type t = kF32) {
    return memory::desc({rows, cols}, t, transposed ? Tag::ba : Tag::ab);
  }

  Entry make_entry(int64_t m, int64_t k, int64_t n) const {
    // bfloat16: operands converted, f32 result; products with a dimension below
    // kBf16MinMatMulDim stay float32 (see there).
    const memory::data_type in = bf16_ && std::min({m, k, n}) >= kBf16MinMatMulDim ? kBF16 : kF32;
    memory::desc a = operand_md(m, k, ta_, in), b = operand_md(k, n, tb_, in);
    memory::desc c({m, n}, kF32, Tag::ab);
    const memory::desc bias = bias_ ? memory::desc({1, n}, kF32, Tag::ab) : memory::desc();
    return prim_entry<dnnl::matmul>({dnnl::matmul::desc(a, b, bias, c), fused_attr(relu_), cpu_engine()});
  }

  const bool ta_, tb_;
  const bool bf16_;  // bfloat16 operands (graph/mixed_precision.h)
  const bool bias_;  // _FusedMatMul: input 2 is a bias added to each row
  const bool relu_;  // and a ReLU follows it
  DnnlPrimitiveCache<std::array<int64_t, 3>, Entry> cache_;
  AlignedBuffer scratch_, a_buf_, b_buf_;  // guarded by cache_
};

// ---- Conv2D geometry ---------------------------------------------------------------------

struct ConvAttrs {
  std::vector<int64_t> strides;
  Padding padding = Padding::kValid;
};

Result<ConvAttrs> parse_conv_attrs(const Node& n) {
  ConvAttrs a;
  auto st = parse_nhwc_window(n.attrs, "strides");
  if (!st.ok()) return st.status().with_prefix(n.op + " '" + n.name + "'");
  auto p = parse_padding(n.attrs);
  if (!p.ok()) return p.status().with_prefix(n.op + " '" + n.name + "'");
  a.strides = *st;
  a.padding = *p;
  return a;
}

// Input [N,H,W,C], filter [KH,KW,C,O] -> output [N,OH,OW,O] with oneDNN's padding vectors.
struct ConvGeometry {
  Shape input, filter, output;
  memory::dims strides, pad_l, pad_r;
};

Result<ConvGeometry> conv_geometry(const OpKernelContext& ctx, const Shape& in, const Shape& f, const ConvAttrs& a) {
  if (in.rank() != 4) return ctx.invalid_argument("input must be rank 4 (NHWC), got shape " + in.to_string());
  if (f.rank() != 4) return ctx.invalid_argument("filter must be rank 4 (HWIO), got shape " + f.to_string());
  if (in.dim(3) != f.dim(2))
    return ctx.invalid_argument("input depth " + std::to_string(in.dim(3)) +
                                " does not match the filter's input depth " + std::to_string(f.dim(2)) + " (input " +
                                in.to_string() + ", filter " + f.to_string() + ")");
  if (f.dim(0) < 1 || f.dim(1) < 1) return ctx.invalid_argument("filter " + f.to_string() + " has an empty window");
  auto h = compute_window(in.dim(1), f.dim(0), a.strides[1], a.padding, "height");
  if (!h.ok()) return ctx.invalid_argument(h.status().message());
  auto w = compute_window(in.dim(2), f.dim(1), a.strides[2], a.padding, "width");
  if (!w.ok()) return ctx.invalid_argument(w.status().message());
  ConvGeometry g;
  g.input = in;
  g.filter = f;
  g.output = Shape{in.dim(0), h->out, w->out, f.dim(3)};
  g.strides = {a.strides[1], a.strides[2]};
  g.pad_l = {h->pad_before, w->pad_before};
  g.pad_r = {h->pad_after, w->pad_after};
  return g;
}

using ConvKey = std::array<int64_t, 8>;
ConvKey conv_key(const ConvGeometry& g) {
  const Shape& in = g.input;
  const Shape& f = g.filter;
  return {in.dim(0), in.dim(1), in.dim(2), in.dim(3), f.dim(0), f.dim(1), f.dim(2), f.dim(3)};
}

// The filter descriptor in oneDNN's preferred layout ("any").
memory::desc filter_any_md(const ConvGeometry& g, memory::data_type t = kF32) {
  return memory::desc({g.filter.dim(3), g.filter.dim(2), g.filter.dim(0), g.filter.dim(1)}, t, Tag::any);
}

// Below this input depth a bfloat16 forward or filter-gradient convolution is no faster than the
// float32 one (measured with oneDNN 2.6 on AMX: the seed's first convolution, depth 1, runs its
// filter gradient 3x slower in bfloat16), so those two stay float32 for such inputs. The input
// gradient has no such case and always honours the mark.
constexpr int64_t kBf16MinInputDepth = 16;

// The operand type of a marked convolution: bfloat16 when asked for (and not ruled out above).
memory::data_type conv_operand_type(bool bf16, const ConvGeometry& g, bool input_gradient) {
  return bf16 && (input_gradient || g.input.dim(3) >= kBf16MinInputDepth) ? kBF16 : kF32;
}

// Descriptor of the forward convolution with filters in oneDNN's preferred layout; `in` is the
// type of the input and filter (the output is float32).
// With `bias`, a float32 bias per output channel is added (_FusedConv2D).
dnnl::convolution_forward::desc conv_fwd_desc(const ConvGeometry& g, dnnl::prop_kind kind,
                                              memory::data_type in = kF32, bool bias = false) {
  const memory::desc bias_md = bias ? memory::desc({g.filter.dim(3)}, kF32, Tag::x) : memory::desc();
  return dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, nhwc_md(g.input, in),
                                         filter_any_md(g, in), bias_md, nhwc_md(g.output), g.strides, g.pad_l,
                                         g.pad_r);
}

// The cache entry of the backward data convolution, hinted by the forward training convolution
// of the same geometry; `in` is the type of the filter and the output gradient.
PrimEntry<dnnl::convolution_backward_data> conv_bwd_data_entry(const ConvGeometry& g, memory::data_type in) {
  dnnl::convolution_forward::primitive_desc hint(conv_fwd_desc(g, dnnl::prop_kind::forward_training, in),
                                                 cpu_engine());
  dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, nhwc_md(g.input), filter_any_md(g, in),
                                          nhwc_md(g.output, in), g.strides, g.pad_l, g.pad_r);
  return prim_entry<dnnl::convolution_backward_data>({d, user_scratchpad_attr(), cpu_engine(), hint});
}

// The cache entry of the backward weights convolution (hinted likewise); `in` is the type of the
// input and the output gradient (the filter gradient is float32).
PrimEntry<dnnl::convolution_backward_weights> conv_bwd_weights_entry(const ConvGeometry& g, memory::data_type in) {
  dnnl::convolution_forward::primitive_desc hint(conv_fwd_desc(g, dnnl::prop_kind::forward_training, in),
                                                 cpu_engine());
  dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, nhwc_md(g.input, in),
                                             filter_any_md(g), nhwc_md(g.output, in), g.strides, g.pad_l, g.pad_r);
  return prim_entry<dnnl::convolution_backward_weights>({d, user_scratchpad_attr(), cpu_engine(), hint});
}

// Filters in the layout and type `want`: the tensor itself when it already is HWIO float32, else
// reordered into `buf`.
memory filter_as(const memory::desc& want, const Tensor& filter, std::optional<dnnl::reorder>& reorder,
                 AlignedBuffer& buf) {
  return staged(want, wrap(hwio_md(filter.shape()), filter.raw_data()), reorder, buf);
}

// An NHWC float32 activation tensor in the type `want` (the tensor itself for float32).
memory activation_as(const memory::desc& want, const Tensor& t, std::optional<dnnl::reorder>& reorder,
                     AlignedBuffer& buf) {
  return staged(want, wrap(nhwc_md(t.shape()), t.raw_data()), reorder, buf);
}

bool empty_shape(const Shape& s) { return s.num_elements() == 0; }

// ---- Conv2D ------------------------------------------------------------------------------

class Conv2DKernel : public OpKernel {
 public:
  // Conv2D, or _FusedConv2D(input, filter, bias) {fused_relu} (graph/fusion.h).
  Conv2DKernel(const Node& n, ConvAttrs a)
      : OpKernel(n),
        attrs_(std::move(a)),
        bf16_(wants_bf16(n)),
        bias_(n.op == "_FusedConv2D"),
        relu_(bias_ && n.attrs.get_or<bool>(kFusedReluAttr, false)) {}

  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "input"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "filter"));
    AF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(ctx, ctx.input(0).shape(), ctx.input(1).shape(), attrs_));
    if (bias_) AF_RETURN_IF_ERROR(check_fused_bias(ctx, g.output.dim(3)));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, g.output));
    if (empty_shape(g.output)) return Status::OK();
    if (empty_shape(g.input)) {  // zero input depth: every sum is empty
      if (bias_) bias_relu_of_zero(out, ctx.input(2), relu_);
      else std::memset(out->raw_data(), 0, out->bytes());
      return Status::OK();
    }
    return guarded(ctx, [&]() -> Status {
      return cache_.with(conv_key(g), [&] { return make_entry(g); }, [&](Entry& e) {
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, activation_as(e.pd.src_desc(), ctx.input(0), e.a_reorder, a_buf_)},
            {DNNL_ARG_WEIGHTS, filter_as(e.pd.weights_desc(), ctx.input(1), e.w_reorder, w_buf_)},
            {DNNL_ARG_DST, wrap(e.pd.dst_desc(), out->raw_data())},
            {DNNL_ARG_SCRATCHPAD, buffer_memory(e.pd.scratchpad_desc(), scratch_)}};
        if (bias_) args.emplace(DNNL_ARG_BIAS, wrap(e.pd.bias_desc(), ctx.input(2).raw_data()));
        return execute(e.prim, args);
      });
    });
  }

 private:
  using Entry = PrimEntry<dnnl::convolution_forward>;

  Entry make_entry(const ConvGeometry& g) const {
    return prim_entry<dnnl::convolution_forward>({conv_fwd_desc(g, dnnl::prop_kind::forward_inference,
                                                                conv_operand_type(bf16_, g, false), bias_),
                                                  fused_attr(relu_), cpu_engine()});
  }

  const ConvAttrs attrs_;
  const bool bf16_;  // bfloat16 operands (graph/mixed_precision.h)
  const bool bias_;  // _FusedConv2D: input 2 is a bias per output channel
  const bool relu_;  // and a ReLU follows it
  DnnlPrimitiveCache<ConvKey, Entry> cache_;
  AlignedBuffer scratch_, w_buf_, a_buf_;  // guarded by cache_
};

// Reads Conv2DBackpropInput's input_sizes tensor (int32/int64, 4 elements).
Result<Shape> read_sizes(const OpKernelContext& ctx, const Tensor& t) {
  if (t.shape().rank() != 1 || t.num_elements() != 4)
    return ctx.invalid_argument("input_sizes must be a 4-element vector, got shape " + t.shape().to_string());
  std::vector<int64_t> d(4);
  for (int i = 0; i < 4; ++i) {
    if (t.dtype() == DType::kInt32) d[static_cast<size_t>(i)] = t.data<int32_t>()[i];
    else if (t.dtype() == DType::kInt64) d[static_cast<size_t>(i)] = t.data<int64_t>()[i];
    else return ctx.invalid_argument(std::string("input_sizes must be int32 or int64, got ") + dtype_name(t.dtype()));
    if (d[static_cast<size_t>(i)] < 0)
      return ctx.invalid_argument("input_sizes must not be negative, got " + Shape(d).to_string());
  }
  return Shape(d);
}

Status check_out_backprop(const OpKernelContext& ctx, const ConvGeometry& g, const Shape& dy) {
  if (dy == g.output) return Status::OK();
  return ctx.invalid_argument("out_backprop " + dy.to_string() + " does not match the convolution output " +
                              g.output.to_string() + " of input " + g.input.to_string() + " and filter " +
                              g.filter.to_string());
}

// Conv2DBackpropInput(input_sizes, filter, out_backprop) -> dL/dinput.
class Conv2DBackpropInputKernel : public OpKernel {
 public:
  Conv2DBackpropInputKernel(const Node& n, ConvAttrs a) : OpKernel(n), attrs_(std::move(a)), bf16_(wants_bf16(n)) {}

  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "filter"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 2, "out_backprop"));
    AF_ASSIGN_OR_RETURN(Shape in, read_sizes(ctx, ctx.input(0)));
    AF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(ctx, in, ctx.input(1).shape(), attrs_));
    AF_RETURN_IF_ERROR(check_out_backprop(ctx, g, ctx.input(2).shape()));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, in));
    if (empty_shape(in)) return Status::OK();
    if (empty_shape(g.output)) {
      std::memset(out->raw_data(), 0, out->bytes());
      return Status::OK();
    }
    return guarded(ctx, [&]() -> Status {
      return cache_.with(conv_key(g), [&] { return conv_bwd_data_entry(g, conv_operand_type(bf16_, g, true)); },
                         [&](Entry& e) {
        return execute(e.prim, {{DNNL_ARG_DIFF_DST, activation_as(e.pd.diff_dst_desc(), ctx.input(2), e.a_reorder, a_buf_)},
                                {DNNL_ARG_WEIGHTS, filter_as(e.pd.weights_desc(), ctx.input(1), e.w_reorder, w_buf_)},
                                {DNNL_ARG_DIFF_SRC, wrap(e.pd.diff_src_desc(), out->raw_data())},
                                {DNNL_ARG_SCRATCHPAD, buffer_memory(e.pd.scratchpad_desc(), scratch_)}});
      });
    });
  }

 private:
  using Entry = PrimEntry<dnnl::convolution_backward_data>;

  const ConvAttrs attrs_;
  const bool bf16_;  // bfloat16 operands (graph/mixed_precision.h)
  DnnlPrimitiveCache<ConvKey, Entry> cache_;
  AlignedBuffer scratch_, w_buf_, a_buf_;  // guarded by cache_
};

// Conv2DBackpropFilter(input, out_backprop), attr filter_sizes -> dL/dfilter (HWIO).
class Conv2DBackpropFilterKernel : public OpKernel {
 public:
  Conv2DBackpropFilterKernel(const Node& n, ConvAttrs a, Shape filter)
      : OpKernel(n), attrs_(std::move(a)), filter_(std::move(filter)), bf16_(wants_bf16(n)) {}

  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "input"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "out_backprop"));
    AF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(ctx, ctx.input(0).shape(), filter_, attrs_));
    AF_RETURN_IF_ERROR(check_out_backprop(ctx, g, ctx.input(1).shape()));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, filter_));
    if (empty_shape(filter_)) return Status::OK();
    if (empty_shape(g.output) || empty_shape(g.input)) {
      std::memset(out->raw_data(), 0, out->bytes());
      return Status::OK();
    }
    return guarded(ctx, [&]() -> Status {
      return cache_.with(conv_key(g), [&] { return conv_bwd_weights_entry(g, conv_operand_type(bf16_, g, false)); },
                         [&](Entry& e) {
        memory user_dw = wrap(hwio_md(filter_), out->raw_data());
        const bool direct = e.pd.diff_weights_desc() == user_dw.get_desc();
        memory dw = direct ? user_dw : buffer_memory(e.pd.diff_weights_desc(), w_buf_);
        e.prim.execute(cpu_stream(), {{DNNL_ARG_SRC, activation_as(e.pd.src_desc(), ctx.input(0), e.a_reorder, a_buf_)},
                                      {DNNL_ARG_DIFF_DST,
                                       activation_as(e.pd.diff_dst_desc(), ctx.input(1), e.b_reorder, b_buf_)},
                                      {DNNL_ARG_DIFF_WEIGHTS, dw},
                                      {DNNL_ARG_SCRATCHPAD, buffer_memory(e.pd.scratchpad_desc(), scratch_)}});
        if (!direct) {  // blocked diff_weights -> HWIO
          if (!e.w_reorder)
            e.w_reorder.emplace(
                dnnl::reorder::primitive_desc(cpu_engine(), dw.get_desc(), cpu_engine(), user_dw.get_desc()));
          e.w_reorder->execute(cpu_stream(), dw, user_dw);
        }
        cpu_stream().wait();
        return Status::OK();
      });
    });
  }

 private:
  using Entry = PrimEntry<dnnl::convolution_backward_weights>;

  const ConvAttrs attrs_;
  const Shape filter_;
  const bool bf16_;  // bfloat16 operands (graph/mixed_precision.h)
  DnnlPrimitiveCache<ConvKey, Entry> cache_;
  AlignedBuffer scratch_, w_buf_, a_buf_, b_buf_;  // guarded by cache_
};

// ---- MaxPool -----------------------------------------------------------------------------

struct PoolAttrs {
  std::vector<int64_t> ksize, strides;
  Padding padding = Padding::kValid;
};

Result<PoolAttrs> parse_pool_attrs(const Node& n) {
  const std::string where = n.op + " '" + n.name + "'";
  PoolAttrs a;
  auto k = parse_nhwc_window(n.attrs, "ksize");
  if (!k.ok()) return k.status().with_prefix(where);
  auto st = parse_nhwc_window(n.attrs, "strides");
  if (!st.ok()) return st.status().with_prefix(where);
  auto p = parse_padding(n.attrs);
  if (!p.ok()) return p.status().with_prefix(where);
  a.ksize = *k;
  a.strides = *st;
  a.padding = *p;
  return a;
}

struct PoolGeometry {
  Shape input, output;
  memory::dims strides, kernel, pad_l, pad_r;
};

Result<PoolGeometry> pool_geometry(const OpKernelContext& ctx, const Shape& in, const PoolAttrs& a) {
  if (in.rank() != 4) return ctx.invalid_argument("input must be rank 4 (NHWC), got shape " + in.to_string());
  auto h = compute_window(in.dim(1), a.ksize[1], a.strides[1], a.padding, "height");
  if (!h.ok()) return ctx.invalid_argument(h.status().message());
  auto w = compute_window(in.dim(2), a.ksize[2], a.strides[2], a.padding, "width");
  if (!w.ok()) return ctx.invalid_argument(w.status().message());
  PoolGeometry g;
  g.input = in;
  g.output = Shape{in.dim(0), h->out, w->out, in.dim(3)};
  g.strides = {a.strides[1], a.strides[2]};
  g.kernel = {a.ksize[1], a.ksize[2]};
  g.pad_l = {h->pad_before, w->pad_before};
  g.pad_r = {h->pad_after, w->pad_after};
  return g;
}

using PoolKey = std::array<int64_t, 4>;
PoolKey pool_key(const PoolGeometry& g) { return {g.input.dim(0), g.input.dim(1), g.input.dim(2), g.input.dim(3)}; }

dnnl::pooling_forward::primitive_desc pool_fwd_pd(const PoolGeometry& g, dnnl::prop_kind kind) {
  return {dnnl::pooling_forward::desc(kind, dnnl::algorithm::pooling_max, nhwc_md(g.input), nhwc_md(g.output),
                                      g.strides, g.kernel, g.pad_l, g.pad_r),
          user_scratchpad_attr(), cpu_engine()};
}

class MaxPoolKernel : public OpKernel {
 public:
  MaxPoolKernel(const Node& n, PoolAttrs a) : OpKernel(n), attrs_(std::move(a)) {}

  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "input"));
    AF_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(ctx, ctx.input(0).shape(), attrs_));
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, g.output));
    if (empty_shape(g.output)) return Status::OK();
    return guarded(ctx, [&]() -> Status {
      return cache_.with(pool_key(g), [&] { return make_entry(g); }, [&](Entry& e) {
        return execute(e.prim, {{DNNL_ARG_SRC, wrap(e.pd.src_desc(), ctx.input(0).raw_data())},
                                {DNNL_ARG_DST, wrap(e.pd.dst_desc(), out->raw_data())},
                                {DNNL_ARG_SCRATCHPAD, buffer_memory(e.pd.scratchpad_desc(), scratch_)}});
      });
    });
  }

 private:
  using Entry = PrimEntry<dnnl::pooling_forward>;

  static Entry make_entry(const PoolGeometry& g) {
    return prim_entry<dnnl::pooling_forward>(pool_fwd_pd(g, dnnl::prop_kind::forward_inference));
  }

  const PoolAttrs attrs_;
  DnnlPrimitiveCache<PoolKey, Entry> cache_;
  AlignedBuffer scratch_;  // guarded by cache_
};

// MaxPoolGrad(orig_input, orig_output, grad): reruns the forward pass in training mode to get
// oneDNN's argmax workspace, then the backward pass routes grad through it.
// MaxPoolGrad without a second forward pass: each output position's gradient goes, channel by
// channel, to the first maximum of its window in scan order (rows, then columns), the input
// element TensorFlow's CPU kernel picks; windows that overlap add up. oneDNN's backward pooling
// needs the forward's workspace, which MaxPool (an inference primitive, no workspace) does not
// keep, so it recomputed the whole forward pass here: measured 3.4 ms of the seed CNN's 34 ms
// worker step, against about 0.5 ms for this loop (bench/cluster_usage.py's breakdown).
// Vectorised across channels (NHWC: a window position's channels are contiguous). When windows
// do not overlap (stride = window, the usual 2x2/2) every input element is written once, the
// window's maximum its gradient and the rest zero, instead of zeroing the whole gradient first
// and adding into it: one pass over memory fewer.
// With `relu_grad` (_FusedMaxPoolGrad, graph/fusion.h) the gradient routed to a window's maximum
// is kept only where that maximum is > 0: ReluGrad(dx, x) applied in the same pass.
void max_pool_grad_nhwc(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
                        const PoolGeometry& g, bool relu_grad) {
  const int64_t n_ = g.input.dim(0), h_ = g.input.dim(1), w_ = g.input.dim(2), c_ = g.input.dim(3);
  const int64_t oh_ = g.output.dim(1), ow_ = g.output.dim(2);
  const bool tiled = g.strides[0] == g.kernel[0] && g.strides[1] == g.kernel[1];
  const auto zero = [&](int64_t pos, int64_t count) {
    if (count > 0) std::memset(dx + pos * c_, 0, static_cast<size_t>(count * c_) * sizeof(float));
  };
  if (!tiled) {
    zero(0, n_ * h_ * w_);
  } else {  // the rows and columns past the last window (VALID's remainder) get no write below
    const int64_t hcov = std::clamp<int64_t>(oh_ * g.strides[0] - g.pad_l[0], 0, h_);
    const int64_t wcov = std::clamp<int64_t>(ow_ * g.strides[1] - g.pad_l[1], 0, w_);
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t h = 0; h < hcov; ++h) zero((n * h_ + h) * w_ + wcov, w_ - wcov);
      zero((n * h_ + hcov) * w_, (h_ - hcov) * w_);
    }
  }
  std::vector<float> best(static_cast<size_t>(c_));
  std::vector<int64_t> arg(static_cast<size_t>(c_));
  float* __restrict bp = best.data();
  int64_t* __restrict ap = arg.data();
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t oh = 0; oh < oh_; ++oh) {
      const int64_t h0 = oh * g.strides[0] - g.pad_l[0];
      const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + g.kernel[0], h_);
      for (int64_t ow = 0; ow < ow_; ++ow) {
        const int64_t w0 = ow * g.strides[1] - g.pad_l[1];
        const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kernel[1], w_);
        if (hs >= he || ws >= we) continue;  // a window wholly in the padding has no input
        const int64_t first = (n * h_ + hs) * w_ + ws;
        const float* x0 = x + first * c_;
        for (int64_t c = 0; c < c_; ++c) {
          bp[c] = x0[c];
          ap[c] = first;
        }
        for (int64_t h = hs; h < he; ++h)
          for (int64_t w = (h == hs ? ws + 1 : ws); w < we; ++w) {
            const int64_t pos = (n * h_ + h) * w_ + w;
            const float* xp = x + pos * c_;
            for (int64_t c = 0; c < c_; ++c) {
              const bool gt = xp[c] > bp[c];
              bp[c] = gt ? xp[c] : bp[c];
              ap[c] = gt ? pos : ap[c];
            }
          }
        const float* gp = dy + ((n * oh_ + oh) * ow_ + ow) * c_;
        if (relu_grad)  // every element a window routes to is its maximum bp[c]
          for (int64_t c = 0; c < c_; ++c) ap[c] = bp[c] > 0.f ? ap[c] : -1;
        if (tiled) {
          for (int64_t h = hs; h < he; ++h)
            for (int64_t w = ws; w < we; ++w) {
              const int64_t pos = (n * h_ + h) * w_ + w;
              float* dp = dx + pos * c_;
              for (int64_t c = 0; c < c_; ++c) dp[c] = ap[c] == pos ? gp[c] : 0.f;
            }
        } else {
          for (int64_t c = 0; c < c_; ++c)
            if (ap[c] >= 0) dx[ap[c] * c_ + c] += gp[c];
        }
      }
    }
}

class MaxPoolGradKernel : public OpKernel {
 public:
  // MaxPoolGrad, or _FusedMaxPoolGrad (MaxPoolGrad then ReluGrad by orig_input; graph/fusion.h).
  MaxPoolGradKernel(const Node& n, PoolAttrs a)
      : OpKernel(n), attrs_(std::move(a)), relu_grad_(n.op == "_FusedMaxPoolGrad") {}

  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "orig_input"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "orig_output"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 2, "grad"));
    AF_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(ctx, ctx.input(0).shape(), attrs_));
    for (int i : {1, 2}) {
      if (ctx.input(i).shape() != g.output)
        return ctx.invalid_argument(std::string(i == 1 ? "orig_output " : "grad ") + ctx.input(i).shape().to_string() +
                                    " does not match the pooled shape " + g.output.to_string());
    }
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, g.input));
    if (empty_shape(g.input)) return Status::OK();
    if (empty_shape(g.output)) {
      std::memset(out->raw_data(), 0, out->bytes());
      return Status::OK();
    }
    max_pool_grad_nhwc(ctx.input(0).data<float>(), ctx.input(2).data<float>(), out->data<float>(), g, relu_grad_);
    return Status::OK();
  }

 private:
  const PoolAttrs attrs_;
  const bool relu_grad_;
};

// ---- elementwise and row kernels ---------------------------------------------------------

class ReluKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "features"));
    const Tensor& x = ctx.input(0);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, x.shape()));
    const float* __restrict a = x.data<float>();
    float* __restrict o = out->data<float>();
    const int64_t n = x.num_elements();
    functors::ReluF f;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    return Status::OK();
  }
};

class ReluGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "gradients"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "features"));
    const Tensor& g = ctx.input(0);
    const Tensor& x = ctx.input(1);
    if (g.shape() != x.shape())
      return ctx.invalid_argument("gradients " + g.shape().to_string() + " and features " + x.shape().to_string() +
                                  " must have the same shape");
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, x.shape()));
    const float* __restrict gp = g.data<float>();
    const float* __restrict xp = x.data<float>();
    float* __restrict o = out->data<float>();
    const int64_t n = x.num_elements();
    functors::ReluGradF f;
    for (int64_t i = 0; i < n; ++i) o[i] = f(gp[i], xp[i]);
    return Status::OK();
  }
};

class BiasAddKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "value"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "bias"));
    const Tensor& v = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (v.shape().rank() < 2)
      return ctx.invalid_argument("value must be at least rank 2, got shape " + v.shape().to_string());
    AF_RETURN_IF_ERROR(require_rank(ctx, 1, 1, "bias"));
    const int64_t c = v.shape().dim(v.shape().rank() - 1);
    if (b.shape().dim(0) != c)
      return ctx.invalid_argument("bias of size " + std::to_string(b.shape().dim(0)) +
                                  " does not match the last dimension " + std::to_string(c) + " of value " +
                                  v.shape().to_string());
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, v.shape()));
    if (c == 0) return Status::OK();
    const int64_t rows = v.num_elements() / c;
    const float* __restrict bp = b.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict vp = v.data<float>() + r * c;
      float* __restrict o = out->data<float>() + r * c;
      for (int64_t j = 0; j < c; ++j) o[j] = vp[j] + bp[j];
    }
    return Status::OK();
  }
};

class BiasAddGradKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "out_backprop"));
    const Tensor& g = ctx.input(0);
    if (g.shape().rank() < 2)
      return ctx.invalid_argument("out_backprop must be at least rank 2, got shape " + g.shape().to_string());
    const int64_t c = g.shape().dim(g.shape().rank() - 1);
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, Shape{c}));
    float* __restrict o = out->data<float>();
    std::fill(o, o + c, 0.f);
    if (c == 0) return Status::OK();
    const int64_t rows = g.num_elements() / c;
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict gp = g.data<float>() + r * c;
      for (int64_t j = 0; j < c; ++j) o[j] += gp[j];
    }
    return Status::OK();
  }
};

// Numerically stable softmax of one row: o = exp(x - max) / sum. Returns log(sum) for reuse.
inline float softmax_row(const float* __restrict x, float* __restrict o, int64_t n, float* row_max) {
  float m = x[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, x[j]);
  for (int64_t j = 0; j < n; ++j) o[j] = functors::af_exp(x[j] - m);  // vectorisable exp (<= 1.5 ulp)
  float sum = 0.f;
  for (int64_t j = 0; j < n; ++j) sum += o[j];
  const float inv = 1.f / sum;
  for (int64_t j = 0; j < n; ++j) o[j] *= inv;
  *row_max = m;
  return std::log(sum);
}

class SoftmaxKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "logits"));
    const Tensor& x = ctx.input(0);
    if (x.shape().rank() < 1) return ctx.invalid_argument("logits must be at least rank 1, got a scalar");
    AF_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kFloat32, x.shape()));
    const int64_t c = x.shape().dim(x.shape().rank() - 1);
    if (c == 0) return Status::OK();
    const int64_t rows = x.num_elements() / c;
    float m;
    for (int64_t r = 0; r < rows; ++r) softmax_row(x.data<float>() + r * c, out->data<float>() + r * c, c, &m);
    return Status::OK();
  }
};

// loss[b] = sum_j labels[b,j] * (log(sum_k exp(x[b,k] - max_b)) - (x[b,j] - max_b));
// backprop[b,j] = softmax(x)[b,j] - labels[b,j]  (TensorFlow's definitions).
class SoftmaxXentKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  Status compute(OpKernelContext& ctx) override {
    AF_RETURN_IF_ERROR(require_f32(ctx, 0, "logits"));
    AF_RETURN_IF_ERROR(require_f32(ctx, 1, "labels"));
    const Tensor& x = ctx.input(0);
    const Tensor& y = ctx.input(1);
    AF_RETURN_IF_ERROR(require_rank(ctx, 0, 2, "logits"));
    if (x.shape() != y.shape())
      return ctx.invalid_argument("logits " + x.shape().to_string() + " and labels " + y.shape().to_string() +
                                  " must have the same shape");
    const int64_t rows = x.shape().dim(0), c = x.shape().dim(1);
    AF_ASSIGN_OR_RETURN(Tensor * loss, ctx.allocate_output(0, DType::kFloat32, Shape{rows}));
    AF_ASSIGN_OR_RETURN(Tensor * back, ctx.allocate_output(1, DType::kFloat32, x.shape()));
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict xr = x.data<float>() + r * c;
      const float* __restrict yr = y.data<float>() + r * c;
      float* __restrict br = back->data<float>() + r * c;
      if (c == 0) {
        loss->data<float>()[r] = 0.f;
        continue;
      }
      float m;
      const float log_sum = softmax_row(xr, br, c, &m);
      float l = 0.f;
      for (int64_t j = 0; j < c; ++j) {
        l += yr[j] * (log_sum - (xr[j] - m));
        br[j] -= yr[j];
      }
      loss->data<float>()[r] = l;
    }
    return Status::OK();
  }
};

// Factory for kernels whose constructor takes parsed attributes, so attribute errors surface
// when the partition is registered.
template <class K, class A>
KernelFactory attr_factory(Result<A> (*parse)(const Node&)) {
  return [parse](const Node& n) -> Result<std::unique_ptr<OpKernel>> {
    auto a = parse(n);
    if (!a.ok()) return a.status();
    return std::unique_ptr<OpKernel>(new K(n, std::move(*a)));
  };
}

Result<std::unique_ptr<OpKernel>> make_backprop_filter(const Node& n) {
  auto a = parse_conv_attrs(n);
  if (!a.ok()) return a.status();
  auto fs = n.attrs.get<std::vector<int64_t>>("filter_sizes");
  if (!fs.ok() || fs->size() != 4)
    return InvalidArgument(n.op + " '" + n.name + "': needs a 4-element int list attribute 'filter_sizes'");
  for (int64_t d : *fs)
    if (d < 0) return InvalidArgument(n.op + " '" + n.name + "': filter_sizes must not be negative");
  return std::unique_ptr<OpKernel>(new Conv2DBackpropFilterKernel(n, std::move(*a), Shape(*fs)));
}

}  // namespace

void set_intra_op_threads(int n) { intra_op_setting().store(std::max(n, 0), std::memory_order_relaxed); }

int intra_op_threads() { return intra_op_setting().load(std::memory_order_relaxed); }

bool cpu_has_native_bfloat16() {
  // oneDNN's ISA values are bit sets, each containing the ones below it (AMX includes BF16).
  static const bool v = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  }();
  return v;
}

void register_cpu_nn_kernels(KernelRegistry& r) {
  r.add("MatMul", "CPU", simple_factory<MatMulKernel>());
  r.add("Conv2D", "CPU", attr_factory<Conv2DKernel, ConvAttrs>(parse_conv_attrs));
  r.add("Conv2DBackpropInput", "CPU", attr_factory<Conv2DBackpropInputKernel, ConvAttrs>(parse_conv_attrs));
  r.add("Conv2DBackpropFilter", "CPU", make_backprop_filter);
  r.add("MaxPool", "CPU", attr_factory<MaxPoolKernel, PoolAttrs>(parse_pool_attrs));
  r.add("MaxPoolGrad", "CPU", attr_factory<MaxPoolGradKernel, PoolAttrs>(parse_pool_attrs));
  r.add("_FusedConv2D", "CPU", attr_factory<Conv2DKernel, ConvAttrs>(parse_conv_attrs));
  r.add("_FusedMatMul", "CPU", simple_factory<MatMulKernel>());
  r.add("_FusedMaxPoolGrad", "CPU", attr_factory<MaxPoolGradKernel, PoolAttrs>(parse_pool_attrs));
  r.add("Relu", "CPU", simple_factory<ReluKernel>());
  r.add("ReluGrad", "CPU", simple_factory<ReluGradKernel>());
  r.add("BiasAdd", "CPU", simple_factory<BiasAddKernel>());
  r.add("BiasAddGrad", "CPU", simple_factory<BiasAddGradKernel>());
  r.add("Softmax", "CPU", simple_factory<SoftmaxKernel>());
  r.add("SoftmaxCrossEntropyWithLogits", "CPU", simple_factory<SoftmaxXentKernel>());
}

}  // namespace actorflow
