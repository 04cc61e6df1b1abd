// Neural-network GPU kernels: MatMul (cuBLAS), Conv2D and its input/filter gradients
// (cuDNN, NHWC tensors), MaxPool and MaxPoolGrad, Softmax (cuDNN) and
// SoftmaxCrossEntropyWithLogits. Attributes and layouts follow graph/ops_nn.cc (TensorFlow's):
// NHWC activations, HWIO filters, strides/ksize {1, h, w, 1}, padding "SAME"/"VALID".
//
// cuDNN takes NHWC filters as KRSC (= OHWI), so filters are transposed to and from TF's
// HWIO in scratch buffers. cuDNN pads symmetrically; TensorFlow's SAME padding puts the odd
// row/column after, so for asymmetric padding the input is copied into a buffer with one
// extra zero row/column at the end (and the input gradient is cropped back).
#include <climits>
#include <type_traits>
#include <string>
#include <vector>

#include "device/cuda/gpu_kernel.h"
#include "device/functors.h"
#include "device/window_plan.h"

namespace actorflow {
namespace {

// ---- small helpers --------------------------------------------------------------------------

Result<int> to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) return InvalidArgument(std::string(what) + " " + std::to_string(v) + " exceeds the int range of cuBLAS/cuDNN");
  return static_cast<int>(v);
}

// A device scratch buffer from the device's allocator (freed when it goes out of scope; safe
// because later work on the same stream is ordered after the kernels that use it).
Result<Tensor> scratch(GpuDevice& dev, DType t, const Shape& s) {
  auto r = Tensor::allocate(dev.allocator(), t, s);
  if (!r.ok()) return Status(r.status().code(), "scratch buffer: " + r.status().message() + "; " + dev.bfc()->summary());
  return r;
}

template <class T> struct CudnnType;
template <> struct CudnnType<float> { static constexpr cudnnDataType_t value = CUDNN_DATA_FLOAT; };
template <> struct CudnnType<double> { static constexpr cudnnDataType_t value = CUDNN_DATA_DOUBLE; };

// RAII cuDNN descriptors.
class TensorDesc {
 public:
  ~TensorDesc() { if (d_) cudnnDestroyTensorDescriptor(d_); }
  Status init(cudnnTensorFormat_t fmt, cudnnDataType_t t, int n, int c, int h, int w) {
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d_));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d_, fmt, t, n, c, h, w));
    return Status::OK();
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  ~FilterDesc() { if (d_) cudnnDestroyFilterDescriptor(d_); }
  // NHWC filter layout = KRSC: [k (out), r (h), s (w), c (in)]; NCHW = KCRS.
  Status init(cudnnDataType_t t, int k, int c, int h, int w, cudnnTensorFormat_t fmt = CUDNN_TENSOR_NHWC) {
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&d_));
    AF_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(d_, t, fmt, k, c, h, w));
    return Status::OK();
  }
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  ~ConvDesc() { if (d_) cudnnDestroyConvolutionDescriptor(d_); }
  Status init(cudnnDataType_t t, int pad_h, int pad_w, int stride_h, int stride_w) {
    AF_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&d_));
    AF_CUDNN_RETURN_IF_ERROR(
        cudnnSetConvolution2dDescriptor(d_, pad_h, pad_w, stride_h, stride_w, 1, 1, CUDNN_CROSS_CORRELATION, t));
    return Status::OK();
  }
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

// ---- layout kernels -------------------------------------------------------------------------

// HWIO [fh, fw, c, k] -> OHWI [k, fh, fw, c].
template <class T>
__global__ void hwio_to_ohwi_kernel(const T* src, T* dst, int64_t fh, int64_t fw, int64_t c, int64_t k) {
  const int64_t n = fh * fw * c * k;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    dst[i] = src[ohwi_from_hwio(i, fh, fw, c, k)];
}

// OHWI [k, fh, fw, c] -> HWIO [fh, fw, c, k].
template <class T>
__global__ void ohwi_to_hwio_kernel(const T* src, T* dst, int64_t fh, int64_t fw, int64_t c, int64_t k) {
  const int64_t n = fh * fw * c * k;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    dst[i] = src[hwio_from_ohwi(i, fh, fw, c, k)];
}

// Copies the [n, h, w, c] corner at the origin from src (spatial s_h x s_w) to dst
// (spatial d_h x d_w). Pads (dst larger, pre-zeroed) or crops (src larger).
template <class T>
__global__ void copy_window_kernel(const T* src, int64_t s_h, int64_t s_w, T* dst, int64_t d_h, int64_t d_w, int64_t n,
                                   int64_t h, int64_t w, int64_t c) {
  const int64_t total = n * h * w * c;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t so, dof;
    window_copy_offsets(i, h, w, c, s_h, s_w, d_h, d_w, &so, &dof);
    dst[dof] = src[so];
  }
}

// A 4-D permutation: dst's dimension i is src's dimension perm[i] (dst dims `dd`, src strides
// `ss` by src dimension).
struct Permute4 {
  int64_t dd[4];
  int64_t ss[4];
  int perm[4];
};

template <class T>
__global__ void permute4_kernel(const T* src, T* dst, Permute4 p, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, off = 0;
    for (int d = 3; d >= 0; --d) {
      const int64_t coord = rest % p.dd[d];
      rest /= p.dd[d];
      off += coord * p.ss[p.perm[d]];
    }
    dst[i] = src[off];
  }
}

// ---- MatMul -------------------------------------------------------------------------------------

// Row-major C[m,n] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first.
class MatMulKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const bool ta = ctx.attrs().get_or<bool>("transpose_a", false);
    const bool tb = ctx.attrs().get_or<bool>("transpose_b", false);
    if (a.shape().rank() != 2 || b.shape().rank() != 2)
      return InvalidArgument("a and b must be matrices, got " + a.shape().to_string() + " and " + b.shape().to_string());
    if (a.dtype() != b.dtype()) return InvalidArgument("a and b must have the same dtype");
    const int64_t m = a.shape().dim(ta ? 1 : 0), k = a.shape().dim(ta ? 0 : 1);
    const int64_t kb = b.shape().dim(tb ? 1 : 0), n = b.shape().dim(tb ? 0 : 1);
    if (k != kb)
      return InvalidArgument("inner dimensions " + std::to_string(k) + " and " + std::to_string(kb) + " differ (a " +
                             a.shape().to_string() + ", b " + b.shape().to_string() + ")");
    AF_ASSIGN_OR_RETURN(Tensor * c, ctx.allocate_output(0, a.dtype(), Shape{m, n}));
    if (m == 0 || n == 0) return Status::OK();
    if (k == 0) {
      AF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c->raw_data(), 0, c->bytes(), dev.stream()));
      return Status::OK();
    }
    AF_ASSIGN_OR_RETURN(int im, to_int(m, "m"));
    AF_ASSIGN_OR_RETURN(int in, to_int(n, "n"));
    AF_ASSIGN_OR_RETURN(int ik, to_int(k, "k"));
    const int lda = static_cast<int>(a.shape().dim(1)), ldb = static_cast<int>(b.shape().dim(1));
    const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    std::lock_guard<std::mutex> lock(dev.library_mutex());
    return dispatch_floating(ctx, a.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      const T one = 1, zero = 0;
      if constexpr (std::is_same_v<T, float>) {
        AF_CUBLAS_RETURN_IF_ERROR(cublasSgemm(dev.cublas(), op_b, op_a, in, im, ik, &one, b.data<float>(), ldb,
                                              a.data<float>(), lda, &zero, c->data<float>(), in));
      } else {
        AF_CUBLAS_RETURN_IF_ERROR(cublasDgemm(dev.cublas(), op_b, op_a, in, im, ik, &one, b.data<double>(), ldb,
                                              a.data<double>(), lda, &zero, c->data<double>(), in));
      }
      return Status::OK();
    });
  }
};

// ---- convolution ---------------------------------------------------------------------------------

// The cuDNN descriptors of a convolution (input as cuDNN sees it: padded size).
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
};

// The layout the convolution kernels hand cuDNN: NHWC (TensorFlow's, no copies) except for the
// gradients in float64, for which cuDNN offers no NHWC algorithm (seen on an H200 with cuDNN 9:
// every backward-data and backward-filter algorithm NOT_SUPPORTED): those run in NCHW/KCRS, with
// their operands and result permuted on the device.
template <class T>
constexpr bool grads_in_nchw() {
  return std::is_same<T, double>::value;
}

template <class T>
Status make_descs(const ConvGeometry& g, ConvDescs* d, bool nchw = false) {
  const cudnnDataType_t t = CudnnType<T>::value;
  const cudnnTensorFormat_t fmt = nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  AF_ASSIGN_OR_RETURN(int n, to_int(g.n, "batch"));
  AF_ASSIGN_OR_RETURN(int c, to_int(g.c, "depth"));
  AF_ASSIGN_OR_RETURN(int k, to_int(g.k, "output depth"));
  AF_RETURN_IF_ERROR(d->x.init(fmt, t, n, c, static_cast<int>(g.ph), static_cast<int>(g.pw)));
  AF_RETURN_IF_ERROR(d->y.init(fmt, t, n, k, static_cast<int>(g.wh.out), static_cast<int>(g.ww.out)));
  AF_RETURN_IF_ERROR(d->w.init(t, k, c, static_cast<int>(g.fh), static_cast<int>(g.fw), fmt));
  AF_RETURN_IF_ERROR(d->conv.init(t, static_cast<int>(g.wh.pad_before), static_cast<int>(g.ww.pad_before),
                                  static_cast<int>(g.sh), static_cast<int>(g.sw)));
  int on, oc, oh, ow;
  AF_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolution2dForwardOutputDim(d->conv.get(), d->x.get(), d->w.get(), &on, &oc, &oh, &ow));
  if (oh != g.wh.out || ow != g.ww.out)
    return Internal("cuDNN output size " + std::to_string(oh) + "x" + std::to_string(ow) +
                    " differs from TensorFlow's " + std::to_string(g.wh.out) + "x" + std::to_string(g.ww.out));
  return Status::OK();
}

// Tries cuDNN's ranked algorithms in order and returns the first whose workspace can be
// allocated. `perf` holds `count` results of a cudnnGet*Algorithm_v7 call. Unimplemented when
// cuDNN supports none for these descriptors; ResourceExhausted when none's workspace fits.
template <class Perf>
Result<std::pair<decltype(Perf{}.algo), Tensor>> pick_algo(GpuDevice& dev, const Perf* perf, int count, const char* what) {
  bool supported = false;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    supported = true;
    auto ws = Tensor::allocate(dev.allocator(), DType::kUInt8, Shape{static_cast<int64_t>(perf[i].memory)});
    if (ws.ok()) return std::make_pair(perf[i].algo, std::move(*ws));
  }
  if (!supported) return Unimplemented(std::string("cuDNN supports no ") + what + " algorithm for these operands");
  return ResourceExhausted(std::string("no cuDNN ") + what + " algorithm fits in device memory; " + dev.bfc()->summary());
}

// Writes into `dst` (of dims src_dims[perm[i]]) the permutation of `src` (dims `src_dims`).
template <class T>
Status permute4(GpuDevice& dev, const T* src, T* dst, const int64_t (&src_dims)[4], const int (&perm)[4]) {
  Permute4 p;
  int64_t stride = 1, total = 1;
  for (int d = 3; d >= 0; --d) {
    p.ss[d] = stride;
    stride *= src_dims[d];
  }
  for (int i = 0; i < 4; ++i) {
    p.perm[i] = perm[i];
    p.dd[i] = src_dims[perm[i]];
    total *= p.dd[i];
  }
  if (total == 0) return Status::OK();
  permute4_kernel<T><<<num_blocks(total), kThreadsPerBlock, 0, dev.stream()>>>(src, dst, p, total);
  return cuda_launch_status("layout permutation kernel");
}

constexpr int kNhwcToNchw[4] = {0, 3, 1, 2};
constexpr int kNchwToNhwc[4] = {0, 2, 3, 1};
constexpr int kHwioToOihw[4] = {3, 2, 0, 1};
constexpr int kOihwToHwio[4] = {2, 3, 1, 0};

template <class T>
Status transpose_filter(GpuDevice& dev, const T* src, T* dst, const ConvGeometry& g, bool to_ohwi) {
  const int64_t n = g.fh * g.fw * g.c * g.k;
  if (n == 0) return Status::OK();
  if (to_ohwi)
    hwio_to_ohwi_kernel<T><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(src, dst, g.fh, g.fw, g.c, g.k);
  else
    ohwi_to_hwio_kernel<T><<<num_blocks(n), kThreadsPerBlock, 0, dev.stream()>>>(src, dst, g.fh, g.fw, g.c, g.k);
  return cuda_launch_status("filter transpose kernel");
}

// Copies the [n, h, w, c] corner between NHWC buffers of spatial sizes (sh, sw) -> (dh, dw).
template <class T>
Status copy_window(GpuDevice& dev, const T* src, int64_t s_h, int64_t s_w, T* dst, int64_t d_h, int64_t d_w,
                   const ConvGeometry& g) {
  const int64_t total = g.n * g.h * g.w * g.c;
  if (total == 0) return Status::OK();
  copy_window_kernel<T><<<num_blocks(total), kThreadsPerBlock, 0, dev.stream()>>>(src, s_h, s_w, dst, d_h, d_w, g.n,
                                                                                  g.h, g.w, g.c);
  return cuda_launch_status("padding copy kernel");
}

// The input as cuDNN sees it: `x` itself, or a zero-padded copy for asymmetric SAME padding.
template <class T>
Result<const T*> padded_input(GpuDevice& dev, const Tensor& x, const ConvGeometry& g, Tensor* holder) {
  if (!g.asymmetric) return x.data<T>();
  AF_ASSIGN_OR_RETURN(*holder, scratch(dev, x.dtype(), Shape{g.n, g.ph, g.pw, g.c}));
  AF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(holder->raw_data(), 0, holder->bytes(), dev.stream()));
  AF_RETURN_IF_ERROR(copy_window<T>(dev, x.data<T>(), g.h, g.w, holder->data<T>(), g.ph, g.pw, g));
  return static_cast<const T*>(holder->data<T>());
}

class Conv2DKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    const Tensor& f = ctx.input(1);
    if (x.dtype() != f.dtype()) return InvalidArgument("input and filter must have the same dtype");
    AF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(ctx.attrs(), x.shape(), f.shape()));
    AF_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), Shape{g.n, g.wh.out, g.ww.out, g.k}));
    if (y->num_elements() == 0) return Status::OK();
    return dispatch_floating(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      AF_ASSIGN_OR_RETURN(Tensor w_ohwi, scratch(dev, f.dtype(), Shape{g.k, g.fh, g.fw, g.c}));
      AF_RETURN_IF_ERROR(transpose_filter<T>(dev, f.data<T>(), w_ohwi.data<T>(), g, true));
      Tensor padded;
      AF_ASSIGN_OR_RETURN(const T* xp, padded_input<T>(dev, x, g, &padded));
      ConvDescs d;
      AF_RETURN_IF_ERROR(make_descs<T>(g, &d));
      std::lock_guard<std::mutex> lock(dev.library_mutex());
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int count = 0;
      AF_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(dev.cudnn(), d.x.get(), d.w.get(), d.conv.get(),
                                                                      d.y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                      &count, perf));
      AF_ASSIGN_OR_RETURN(auto algo, pick_algo(dev, perf, count, "forward convolution"));
      const T one = 1, zero = 0;
      AF_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(dev.cudnn(), &one, d.x.get(), xp, d.w.get(), w_ohwi.data<T>(),
                                                       d.conv.get(), algo.first, algo.second.raw_data(),
                                                       algo.second.bytes(), &zero, d.y.get(), y->data<T>()));
      return Status::OK();
    });
  }
};

// Conv2DBackpropInput(input_sizes, filter, out_backprop) -> the gradient of the input.
class Conv2DBackpropInputKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    // The shape function resolved a constant input_sizes into the static output shape; only
    // otherwise read the (device) tensor, which waits for the stream.
    std::vector<int64_t> sizes;
    const Node& n = ctx.node();
    if (!n.output_shapes.empty() && n.output_shapes[0].fully_defined() && n.output_shapes[0].rank() == 4) {
      sizes = n.output_shapes[0].dims();
    } else {
      AF_ASSIGN_OR_RETURN(sizes, read_int_vector(ctx, ctx.input(0)));
    }
    if (sizes.size() != 4) return InvalidArgument("input_sizes must have 4 elements, got " + std::to_string(sizes.size()));
    const Tensor& f = ctx.input(1);
    const Tensor& dy = ctx.input(2);
    if (f.dtype() != dy.dtype()) return InvalidArgument("filter and out_backprop must have the same dtype");
    const Shape in_shape(sizes);
    AF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(ctx.attrs(), in_shape, f.shape()));
    const Shape expect{g.n, g.wh.out, g.ww.out, g.k};
    if (dy.shape() != expect)
      return InvalidArgument("out_backprop " + dy.shape().to_string() + " does not match the convolution output " +
                             expect.to_string());
    AF_ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, f.dtype(), in_shape));
    if (dx->num_elements() == 0) return Status::OK();
    if (dy.num_elements() == 0) {
      AF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dx->raw_data(), 0, dx->bytes(), dev.stream()));
      return Status::OK();
    }
    return dispatch_floating(ctx, f.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      constexpr bool nchw = grads_in_nchw<T>();
      // The filter as cuDNN takes it: OHWI (KRSC), or OIHW (KCRS) in NCHW.
      AF_ASSIGN_OR_RETURN(Tensor w_c, scratch(dev, f.dtype(), nchw ? Shape{g.k, g.c, g.fh, g.fw} : Shape{g.k, g.fh, g.fw, g.c}));
      if (nchw) AF_RETURN_IF_ERROR(permute4<T>(dev, f.data<T>(), w_c.data<T>(), {g.fh, g.fw, g.c, g.k}, kHwioToOihw));
      else AF_RETURN_IF_ERROR(transpose_filter<T>(dev, f.data<T>(), w_c.data<T>(), g, true));
      Tensor padded;
      T* dxp = dx->data<T>();
      if (g.asymmetric) {
        AF_ASSIGN_OR_RETURN(padded, scratch(dev, f.dtype(), Shape{g.n, g.ph, g.pw, g.c}));
        dxp = padded.data<T>();
      }
      // NCHW: dy permuted in, the gradient computed into dx_c and permuted out to dxp.
      Tensor dy_c, dx_c;
      const T* dyp = dy.data<T>();
      T* dx_out = dxp;
      if (nchw) {
        AF_ASSIGN_OR_RETURN(dy_c, scratch(dev, f.dtype(), Shape{g.n, g.k, g.wh.out, g.ww.out}));
        AF_RETURN_IF_ERROR(permute4<T>(dev, dy.data<T>(), dy_c.data<T>(), {g.n, g.wh.out, g.ww.out, g.k}, kNhwcToNchw));
        dyp = dy_c.data<T>();
        AF_ASSIGN_OR_RETURN(dx_c, scratch(dev, f.dtype(), Shape{g.n, g.c, g.ph, g.pw}));
        dx_out = dx_c.data<T>();
      }
      ConvDescs d;
      AF_RETURN_IF_ERROR(make_descs<T>(g, &d, nchw));
      {
        std::lock_guard<std::mutex> lock(dev.library_mutex());
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int count = 0;
        AF_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            dev.cudnn(), d.w.get(), d.y.get(), d.conv.get(), d.x.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
            perf));
        AF_ASSIGN_OR_RETURN(auto algo, pick_algo(dev, perf, count, "backward-data convolution"));
        const T one = 1, zero = 0;
        AF_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(dev.cudnn(), &one, d.w.get(), w_c.data<T>(), d.y.get(),
                                                              dyp, d.conv.get(), algo.first, algo.second.raw_data(),
                                                              algo.second.bytes(), &zero, d.x.get(), dx_out));
      }
      if (nchw) AF_RETURN_IF_ERROR(permute4<T>(dev, dx_out, dxp, {g.n, g.c, g.ph, g.pw}, kNchwToNhwc));
      if (g.asymmetric) AF_RETURN_IF_ERROR(copy_window<T>(dev, dxp, g.ph, g.pw, dx->data<T>(), g.h, g.w, g));
      return Status::OK();
    });
  }
};

// Conv2DBackpropFilter(input, out_backprop), attr filter_sizes -> the gradient of the filter.
class Conv2DBackpropFilterKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> fs, ctx.attrs().get<std::vector<int64_t>>("filter_sizes"));
    if (fs.size() != 4) return InvalidArgument("filter_sizes must have 4 elements");
    const Tensor& x = ctx.input(0);
    const Tensor& dy = ctx.input(1);
    if (x.dtype() != dy.dtype()) return InvalidArgument("input and out_backprop must have the same dtype");
    const Shape f_shape(fs);
    AF_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(ctx.attrs(), x.shape(), f_shape));
    const Shape expect{g.n, g.wh.out, g.ww.out, g.k};
    if (dy.shape() != expect)
      return InvalidArgument("out_backprop " + dy.shape().to_string() + " does not match the convolution output " +
                             expect.to_string());
    AF_ASSIGN_OR_RETURN(Tensor * dw, ctx.allocate_output(0, x.dtype(), f_shape));
    if (dw->num_elements() == 0) return Status::OK();
    if (dy.num_elements() == 0) {
      AF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dw->raw_data(), 0, dw->bytes(), dev.stream()));
      return Status::OK();
    }
    return dispatch_floating(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      constexpr bool nchw = grads_in_nchw<T>();
      // The gradient as cuDNN writes it: OHWI (KRSC), or OIHW (KCRS) in NCHW.
      AF_ASSIGN_OR_RETURN(Tensor dw_c, scratch(dev, x.dtype(), nchw ? Shape{g.k, g.c, g.fh, g.fw} : Shape{g.k, g.fh, g.fw, g.c}));
      Tensor padded;
      AF_ASSIGN_OR_RETURN(const T* xp, padded_input<T>(dev, x, g, &padded));
      const T* dyp = dy.data<T>();
      Tensor x_c, dy_c;
      if (nchw) {
        AF_ASSIGN_OR_RETURN(x_c, scratch(dev, x.dtype(), Shape{g.n, g.c, g.ph, g.pw}));
        AF_RETURN_IF_ERROR(permute4<T>(dev, xp, x_c.data<T>(), {g.n, g.ph, g.pw, g.c}, kNhwcToNchw));
        xp = x_c.data<T>();
        AF_ASSIGN_OR_RETURN(dy_c, scratch(dev, x.dtype(), Shape{g.n, g.k, g.wh.out, g.ww.out}));
        AF_RETURN_IF_ERROR(permute4<T>(dev, dy.data<T>(), dy_c.data<T>(), {g.n, g.wh.out, g.ww.out, g.k}, kNhwcToNchw));
        dyp = dy_c.data<T>();
      }
      ConvDescs d;
      AF_RETURN_IF_ERROR(make_descs<T>(g, &d, nchw));
      {
        std::lock_guard<std::mutex> lock(dev.library_mutex());
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int count = 0;
        AF_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            dev.cudnn(), d.x.get(), d.y.get(), d.conv.get(), d.w.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
            &count, perf));
        AF_ASSIGN_OR_RETURN(auto algo, pick_algo(dev, perf, count, "backward-filter convolution"));
        const T one = 1, zero = 0;
        AF_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(dev.cudnn(), &one, d.x.get(), xp, d.y.get(), dyp,
                                                                d.conv.get(), algo.first, algo.second.raw_data(),
                                                                algo.second.bytes(), &zero, d.w.get(), dw_c.data<T>()));
      }
      if (nchw) return permute4<T>(dev, dw_c.data<T>(), dw->data<T>(), {g.k, g.c, g.fh, g.fw}, kOihwToHwio);
      return transpose_filter<T>(dev, dw_c.data<T>(), dw->data<T>(), g, false);
    });
  }
};

// ---- max pooling ------------------------------------------------------------------------------------

template <class T>
__global__ void max_pool_kernel(const T* x, T* y, PoolGeometry g, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    T v;
    pool_window_argmax(x, g, i, &v);
    y[i] = v;
  }
}

template <class T>
__global__ void max_pool_grad_kernel(const T* x, const T* dy, T* dx, PoolGeometry g, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    T v;
    const int64_t off = pool_window_argmax(x, g, i, &v);
    if (off >= 0) atomicAdd(dx + off, dy[i]);
  }
}

class MaxPoolKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    AF_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(ctx.attrs(), x.shape()));
    AF_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), Shape{g.n, g.wh.out, g.ww.out, g.c}));
    const int64_t total = y->num_elements();
    if (total == 0) return Status::OK();
    return dispatch_floating(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      max_pool_kernel<T><<<num_blocks(total), kThreadsPerBlock, 0, dev.stream()>>>(x.data<T>(), y->data<T>(), g, total);
      return cuda_launch_status("MaxPool kernel");
    });
  }
};

// MaxPoolGrad(orig_input, orig_output, grad): each output's gradient goes to the first
// maximum of its window (TensorFlow's rule), accumulated atomically where windows overlap.
class MaxPoolGradKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    const Tensor& dy = ctx.input(2);
    AF_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(ctx.attrs(), x.shape()));
    const Shape pooled{g.n, g.wh.out, g.ww.out, g.c};
    if (dy.shape() != pooled || ctx.input(1).shape() != pooled)
      return InvalidArgument("orig_output " + ctx.input(1).shape().to_string() + " and grad " + dy.shape().to_string() +
                             " must have the pooled shape " + pooled.to_string());
    if (x.dtype() != dy.dtype()) return InvalidArgument("orig_input and grad must have the same dtype");
    AF_ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, x.dtype(), x.shape()));
    if (dx->num_elements() == 0) return Status::OK();
    AF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dx->raw_data(), 0, dx->bytes(), dev.stream()));
    const int64_t total = dy.num_elements();
    if (total == 0) return Status::OK();
    return dispatch_floating(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      max_pool_grad_kernel<T><<<num_blocks(total), kThreadsPerBlock, 0, dev.stream()>>>(x.data<T>(), dy.data<T>(),
                                                                                         dx->data<T>(), g, total);
      return cuda_launch_status("MaxPoolGrad kernel");
    });
  }
};

// ---- softmax ---------------------------------------------------------------------------------------

// Softmax over the last dim via cuDNN (rows x classes as an N x C x 1 x 1 tensor).
class SoftmaxKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& x = ctx.input(0);
    if (x.shape().rank() < 1) return InvalidArgument("logits must have rank >= 1, got a scalar");
    AF_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.shape()));
    const int64_t classes = x.shape().dim(x.shape().rank() - 1);
    if (y->num_elements() == 0) return Status::OK();
    const int64_t rows = x.num_elements() / classes;
    AF_ASSIGN_OR_RETURN(int ir, to_int(rows, "rows"));
    AF_ASSIGN_OR_RETURN(int ic, to_int(classes, "classes"));
    return dispatch_floating(ctx, x.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      TensorDesc desc;
      AF_RETURN_IF_ERROR(desc.init(CUDNN_TENSOR_NCHW, CudnnType<T>::value, ir, ic, 1, 1));
      const T one = 1, zero = 0;
      std::lock_guard<std::mutex> lock(dev.library_mutex());
      AF_CUDNN_RETURN_IF_ERROR(cudnnSoftmaxForward(dev.cudnn(), CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE,
                                                   &one, desc.get(), x.data<T>(), &zero, desc.get(), y->data<T>()));
      return Status::OK();
    });
  }
};

constexpr int kXentThreads = 128;

// Tree reduction over the block; every thread gets the result. `smem` holds kXentThreads.
template <class T, class F>
__device__ T block_reduce(T v, T* smem, F f) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = kXentThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] = f(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = smem[0];
  __syncthreads();
  return r;
}

// One block per row: loss = sum(labels * (log(sum(exp(l - max))) - (l - max))),
// backprop = softmax(l) - labels (TensorFlow's formulation).
template <class T>
__global__ void xent_kernel(const T* logits, const T* labels, T* loss, T* backprop, int64_t rows, int64_t c) {
  __shared__ __align__(16) unsigned char smem_raw[kXentThreads * sizeof(T)];
  T* smem = reinterpret_cast<T*>(smem_raw);
  functors::MaximumF maxf;
  functors::AddF addf;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* l = logits + row * c;
    const T* y = labels + row * c;
    T m = functors::af_lowest<T>();
    for (int64_t j = threadIdx.x; j < c; j += kXentThreads) m = maxf(m, l[j]);
    m = block_reduce(m, smem, maxf);
    T s = 0;
    for (int64_t j = threadIdx.x; j < c; j += kXentThreads) s += functors::af_exp(l[j] - m);
    s = block_reduce(s, smem, addf);
    const T log_s = functors::af_log(s);
    T acc = 0;
    for (int64_t j = threadIdx.x; j < c; j += kXentThreads) {
      const T shifted = l[j] - m;
      acc += y[j] * (log_s - shifted);
      backprop[row * c + j] = functors::af_exp(shifted) / s - y[j];
    }
    acc = block_reduce(acc, smem, addf);
    if (threadIdx.x == 0) loss[row] = acc;
  }
}

class SoftmaxXentKernel : public GpuOpKernel {
 public:
  using GpuOpKernel::GpuOpKernel;
  Status compute_gpu(OpKernelContext& ctx, GpuDevice& dev) override {
    const Tensor& logits = ctx.input(0);
    const Tensor& labels = ctx.input(1);
    if (logits.shape().rank() != 2 || logits.shape() != labels.shape())
      return InvalidArgument("logits and labels must be matrices of one shape, got " + logits.shape().to_string() +
                             " and " + labels.shape().to_string());
    if (logits.dtype() != labels.dtype()) return InvalidArgument("logits and labels must have the same dtype");
    const int64_t rows = logits.shape().dim(0), c = logits.shape().dim(1);
    AF_ASSIGN_OR_RETURN(Tensor * loss, ctx.allocate_output(0, logits.dtype(), Shape{rows}));
    AF_ASSIGN_OR_RETURN(Tensor * backprop, ctx.allocate_output(1, logits.dtype(), logits.shape()));
    if (rows == 0) return Status::OK();
    if (c == 0) {
      AF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(loss->raw_data(), 0, loss->bytes(), dev.stream()));
      return Status::OK();
    }
    return dispatch_floating(ctx, logits.dtype(), [&](auto tag) -> Status {
      using T = decltype(tag);
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
      xent_kernel<T><<<blocks, kXentThreads, 0, dev.stream()>>>(logits.data<T>(), labels.data<T>(), loss->data<T>(),
                                                                backprop->data<T>(), rows, c);
      return cuda_launch_status("SoftmaxCrossEntropyWithLogits kernel");
    });
  }
};

}  // namespace

void register_gpu_nn_kernels(KernelRegistry& r) {
  r.add("MatMul", "GPU", gpu_factory<MatMulKernel>());
  r.add("Conv2D", "GPU", gpu_factory<Conv2DKernel>());
  r.add("Conv2DBackpropInput", "GPU", gpu_factory<Conv2DBackpropInputKernel>());
  r.add("Conv2DBackpropFilter", "GPU", gpu_factory<Conv2DBackpropFilterKernel>());
  r.add("MaxPool", "GPU", gpu_factory<MaxPoolKernel>());
  r.add("MaxPoolGrad", "GPU", gpu_factory<MaxPoolGradKernel>());
  r.add("Softmax", "GPU", gpu_factory<SoftmaxKernel>());
  r.add("SoftmaxCrossEntropyWithLogits", "GPU", gpu_factory<SoftmaxXentKernel>());
}

}  // namespace actorflow
