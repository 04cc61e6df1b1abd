#include "device/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/logging.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/gpu_device.h"
#include "device/cuda/gpu_profile.h"
#include "device/cuda/optimizer_kernels.h"
#include "device/gpu_options.h"

namespace actorflow {

// ---- status conversion ----------------------------------------------------------------------

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  (void)cudaGetLastError();  // clear the (non-sticky) error so the next check starts clean
  std::string msg = std::string(what) + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  switch (e) {
    case cudaErrorMemoryAllocation:
      return ResourceExhausted(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
      return Unavailable(msg);
    default:
      return Internal(msg);
  }
}

Status cuda_launch_status(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::OK();
  return cuda_status(e, (std::string("launching ") + what).c_str());
}

namespace {
const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}
}  // namespace

Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::OK();
  std::string msg = std::string(what) + " failed: " + cublas_name(s);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhausted(msg);
  return Internal(msg);
}

Status cudnn_status(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::OK();
  std::string msg = std::string(what) + " failed: " + cudnnGetErrorString(s);
  switch (s) {
    case CUDNN_STATUS_ALLOC_FAILED: return ResourceExhausted(msg);
    case CUDNN_STATUS_BAD_PARAM:
    case CUDNN_STATUS_NOT_SUPPORTED: return InvalidArgument(msg);
    default: return Internal(msg);
  }
}

// ---- RAII deleters ----------------------------------------------------------------------------

namespace cuda_detail {
void StreamDeleter::operator()(CUstream_st* s) const {
  if (!s) return;
  cudaSetDevice(ordinal);
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
}
void CublasDeleter::operator()(cublasContext* h) const {
  if (!h) return;
  cudaSetDevice(ordinal);
  cublasDestroy(h);
}
void CudnnDeleter::operator()(cudnnContext* h) const {
  if (!h) return;
  cudaSetDevice(ordinal);
  cudnnDestroy(h);
}
void PinnedDeleter::operator()(void* p) const {
  if (p) cudaFreeHost(p);
}
}  // namespace cuda_detail

namespace {

// Device memory regions for the BFC allocator: cudaMalloc / cudaFree on one device.
class CudaSubAllocator final : public SubAllocator {
 public:
  explicit CudaSubAllocator(int ordinal) : ordinal_(ordinal) {}
  void* alloc(size_t alignment, size_t bytes) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    void* p = nullptr;
    // cudaMalloc returns 256-byte aligned memory, enough for the BFC allocator's chunks.
    if (alignment > 256 || cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free(void* ptr, size_t) override {
    if (!ptr) return;
    cudaSetDevice(ordinal_);
    cudaFree(ptr);
  }
  bool host_accessible() const override { return false; }

 private:
  int ordinal_;
};

// Bytes of the pinned staging buffer per device; larger copies are done in chunks.
constexpr size_t kStagingBytes = size_t{8} << 20;

Result<GpuInfo> query_gpu(int ordinal) {
  GpuInfo info;
  info.ordinal = ordinal;
  cudaDeviceProp prop;
  AF_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  char bus[32] = {0};
  AF_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal));
  info.pci_bus_id = bus;
  AF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  size_t free_b = 0, total_b = 0;
  AF_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  info.free_bytes = static_cast<int64_t>(free_b);
  info.total_bytes = static_cast<int64_t>(total_b);
  return info;
}

}  // namespace

std::string gpu_description(const GpuInfo& info) {
  return "device: " + std::to_string(info.ordinal) + ", name: " + info.name + ", pci bus id: " + info.pci_bus_id +
         ", compute capability: " + std::to_string(info.cc_major) + "." + std::to_string(info.cc_minor);
}

// ---- GpuDevice ----------------------------------------------------------------------------------

Result<std::unique_ptr<GpuDevice>> GpuDevice::create(const std::string& full_name, int index, const GpuInfo& info,
                                                     const DeviceEnumerationOptions& opts) {
  const std::string where = "GPU device " + full_name + " (" + gpu_description(info) + ")";
  auto annotate = [&](const Status& s) { return Status(s.code(), where + ": " + s.message()); };

  BFCOptions bo;
  bo.memory_limit = gpu_memory_limit(opts.gpu_memory_fraction, info.total_bytes, info.free_bytes);
  bo.allow_growth = opts.allow_growth;
  if (bo.memory_limit < 256) return annotate(ResourceExhausted("no free device memory"));
  if (bo.memory_limit > info.free_bytes) {
    AF_LOG(WARNING) << full_name << ": gpu_memory_fraction " << opts.gpu_memory_fraction << " asks for "
                    << human_bytes(bo.memory_limit) << " but only " << human_bytes(info.free_bytes)
                    << " are free";
  }
  DeviceAttributes attrs;
  attrs.name = full_name;
  attrs.type = "GPU";
  attrs.index = index;
  attrs.memory_limit = bo.memory_limit;
  attrs.description = gpu_description(info);
  std::unique_ptr<GpuDevice> d(new GpuDevice(std::move(attrs), info));

  Status s = cuda_status(cudaSetDevice(info.ordinal), "cudaSetDevice");
  if (!s.ok()) return annotate(s);
  auto bfc = BFCAllocator::create(std::make_unique<CudaSubAllocator>(info.ordinal),
                                  "gpu_" + std::to_string(index) + "_bfc", bo);
  if (!bfc.ok()) return annotate(bfc.status());
  d->allocator_ = std::move(*bfc);

  cudaStream_t stream = nullptr;
  s = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  if (!s.ok()) return annotate(s);
  d->stream_ = {stream, cuda_detail::StreamDeleter{info.ordinal}};

  cublasHandle_t blas = nullptr;
  s = cublas_status(cublasCreate(&blas), "cublasCreate");
  if (!s.ok()) return annotate(s);
  d->cublas_ = {blas, cuda_detail::CublasDeleter{info.ordinal}};
  s = cublas_status(cublasSetStream(blas, stream), "cublasSetStream");
  if (!s.ok()) return annotate(s);

  cudnnHandle_t dnn = nullptr;
  s = cudnn_status(cudnnCreate(&dnn), "cudnnCreate");
  if (!s.ok()) return annotate(s);
  d->cudnn_ = {dnn, cuda_detail::CudnnDeleter{info.ordinal}};
  s = cudnn_status(cudnnSetStream(dnn, stream), "cudnnSetStream");
  if (!s.ok()) return annotate(s);

  void* pinned = nullptr;
  s = cuda_status(cudaHostAlloc(&pinned, kStagingBytes, cudaHostAllocDefault), "cudaHostAlloc");
  if (!s.ok()) return annotate(s);
  d->staging_.reset(pinned);
  d->staging_bytes_ = kStagingBytes;

  if (info.cc_major < 8) {
    AF_LOG(WARNING) << full_name << ": compute capability " << info.cc_major << "." << info.cc_minor
                    << " is below the 8.0 the kernels were built for (CMAKE_CUDA_ARCHITECTURES); kernels will fail";
  }
  AF_LOG(INFO) << "Created device " << full_name << " with " << (bo.memory_limit >> 20) << " MB memory ("
               << (bo.allow_growth ? "allow_growth" : "reserved up front") << ") -> " << gpu_description(info);
  return d;
}

GpuDevice::~GpuDevice() {
  if (stream_) {
    cudaSetDevice(info_.ordinal);
    cudaStreamSynchronize(stream_.get());
  }
  // Members release in reverse order: staging, cuDNN, cuBLAS, stream, then device memory.
}

Status GpuDevice::activate() const { return cuda_status(cudaSetDevice(info_.ordinal), "cudaSetDevice"); }

Status GpuDevice::sync() {
  AF_RETURN_IF_ERROR(activate());
  return cuda_status(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
}

Status GpuDevice::staged_copy(void* dst, const void* src, size_t bytes, bool to_device) {
  std::lock_guard<std::mutex> lock(staging_mu_);
  AF_RETURN_IF_ERROR(activate());
  char* stage = static_cast<char*>(staging_.get());
  GpuProfiler& prof = GpuProfiler::global();
  const bool timed = prof.enabled();
  auto host_copy = [&](void* to, const void* from, size_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to, from, n);
    if (timed) prof.add_staging_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  };
  for (size_t off = 0; off < bytes; off += staging_bytes_) {
    const size_t n = std::min(staging_bytes_, bytes - off);
    if (to_device) {
      host_copy(stage, static_cast<const char*>(src) + off, n);
      const GpuProfiler::Mark mark = prof.begin(stream_.get());
      AF_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(static_cast<char*>(dst) + off, stage, n, cudaMemcpyHostToDevice, stream_.get()));
      prof.end(mark, "host to device", /*copy=*/true);
      // The staging buffer is reused by the next chunk: wait for this one.
      AF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    } else {
      const GpuProfiler::Mark mark = prof.begin(stream_.get());
      AF_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(stage, static_cast<const char*>(src) + off, n, cudaMemcpyDeviceToHost, stream_.get()));
      prof.end(mark, "device to host", /*copy=*/true);
      AF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
      host_copy(static_cast<char*>(dst) + off, stage, n);
    }
  }
  return Status::OK();
}

Result<Tensor> GpuDevice::copy_to_host(const Tensor& t) {
  if (!t.is_initialized() || t.on_host()) return t;
  if (t.buffer()->allocator() != allocator_.get())
    return InvalidArgument(name() + ": copy_to_host of a tensor that lives on another device (allocator '" +
                           t.buffer()->allocator()->name() + "')");
  AF_ASSIGN_OR_RETURN(Tensor host, Tensor::allocate(cpu_allocator(), t.dtype(), t.shape()));
  Status s = staged_copy(host.raw_data(), t.raw_data(), t.bytes(), /*to_device=*/false);
  if (!s.ok()) return Status(s.code(), name() + ": copying " + t.debug_string() + " to the host: " + s.message());
  return host;
}

Result<Tensor> GpuDevice::copy_from_host(const Tensor& t) {
  if (!t.is_initialized()) return t;
  if (!t.on_host()) {
    if (t.buffer()->allocator() == allocator_.get()) return t;
    return InvalidArgument(name() + ": copy_from_host of a tensor that is not in host memory (allocator '" +
                           t.buffer()->allocator()->name() + "')");
  }
  auto dev = Tensor::allocate(allocator_.get(), t.dtype(), t.shape());
  if (!dev.ok())
    return Status(dev.status().code(), name() + ": " + dev.status().message() + "; " + allocator_->summary());
  Status s = staged_copy(dev->raw_data(), t.raw_data(), t.bytes(), /*to_device=*/true);
  if (!s.ok()) return Status(s.code(), name() + ": copying " + t.debug_string() + " to the device: " + s.message());
  return dev;
}

Result<Tensor> GpuDevice::duplicate(const Tensor& t) {
  if (!t.is_initialized()) return t;
  if (t.on_host()) return copy_from_host(t);
  if (t.buffer()->allocator() != allocator_.get())
    return InvalidArgument(name() + ": duplicate of a tensor that lives on another device (allocator '" +
                           t.buffer()->allocator()->name() + "')");
  auto d = Tensor::allocate(allocator_.get(), t.dtype(), t.shape());
  if (!d.ok()) return Status(d.status().code(), name() + ": " + d.status().message() + "; " + allocator_->summary());
  if (t.bytes() == 0) return d;
  AF_RETURN_IF_ERROR(activate());
  Status s = cuda_status(cudaMemcpyAsync(d->raw_data(), t.raw_data(), t.bytes(), cudaMemcpyDeviceToDevice, stream_.get()),
                         "cudaMemcpyAsync(device to device)");
  if (!s.ok()) return Status(s.code(), name() + ": copying " + t.debug_string() + ": " + s.message());
  return d;
}

Status GpuDevice::apply_dense_update(const DenseUpdate& u, Tensor& w, Tensor* s1, Tensor* s2, const Tensor& g) {
  AF_RETURN_IF_ERROR(activate());
  GpuProfiler& prof = GpuProfiler::global();
  const GpuProfiler::Mark mark = prof.begin(stream());
  Status s = apply_dense_update_unprofiled(u, w, s1, s2, g);
  prof.end(mark, "variable update", /*copy=*/false);
  return s;
}

Status GpuDevice::apply_dense_update_unprofiled(const DenseUpdate& u, Tensor& w, Tensor* s1, Tensor* s2,
                                                const Tensor& g) {
  auto need = [&](Tensor* s, const char* what) -> Status {
    if (!s || !s->is_initialized()) return InvalidArgument(name() + ": the update needs " + what);
    return Status::OK();
  };
  switch (u.kind) {
    case DenseUpdate::Kind::kSgd:
      return gpu_apply_sgd(*this, w, g, u.lr);
    case DenseUpdate::Kind::kMomentum:
      AF_RETURN_IF_ERROR(need(s1, "the accumulator"));
      return gpu_apply_momentum(*this, w, *s1, g, u.lr, u.momentum, u.use_nesterov);
    case DenseUpdate::Kind::kAdam:
      AF_RETURN_IF_ERROR(need(s1, "the first moment (m)"));
      AF_RETURN_IF_ERROR(need(s2, "the second moment (v)"));
      return gpu_apply_adam(*this, w, *s1, *s2, g, u.lr, u.beta1, u.beta2, u.epsilon, u.adam_t);
    case DenseUpdate::Kind::kAdagrad:
      AF_RETURN_IF_ERROR(need(s1, "the accumulator"));
      return gpu_apply_adagrad(*this, w, *s1, g, u.lr);
    case DenseUpdate::Kind::kRmsProp:
      AF_RETURN_IF_ERROR(need(s1, "the mean square (ms)"));
      AF_RETURN_IF_ERROR(need(s2, "the momentum (mom)"));
      return gpu_apply_rms_prop(*this, w, *s1, *s2, g, u.lr, u.decay, u.momentum, u.epsilon);
  }
  return InvalidArgument(name() + ": unknown dense update kind");
}

int cuda_device_count(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
    return 0;
  }
  if (count == 0 && why) *why = "the driver reports 0 devices";
  return count;
}

// ---- factory --------------------------------------------------------------------------------------

Result<std::vector<std::unique_ptr<Device>>> create_cuda_devices(const std::string& task_prefix,
                                                                 const DeviceEnumerationOptions& opts) {
  std::vector<std::unique_ptr<Device>> out;
  AF_RETURN_IF_ERROR(validate_gpu_options(opts));
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
      AF_LOG(INFO) << "No CUDA GPU visible (" << cudaGetErrorString(e) << "); using CPU devices only";
    } else {
      AF_LOG(WARNING) << "No usable CUDA GPU: cudaGetDeviceCount failed: " << cudaGetErrorString(e) << " ("
                      << cudaGetErrorName(e) << "); using CPU devices only";
    }
    return out;
  }
  if (count == 0) {
    AF_LOG(INFO) << "No CUDA GPU visible (the driver reports 0 devices); using CPU devices only";
    return out;
  }
  AF_ASSIGN_OR_RETURN(std::vector<int> ordinals, resolve_visible_devices(opts.visible_devices, count));
  for (size_t i = 0; i < ordinals.size(); ++i) {
    AF_ASSIGN_OR_RETURN(GpuInfo info, query_gpu(ordinals[i]));
    const std::string name = task_prefix + "/device:GPU:" + std::to_string(i);
    AF_ASSIGN_OR_RETURN(auto dev, GpuDevice::create(name, static_cast<int>(i), info, opts));
    out.push_back(std::move(dev));
  }
  return out;
}

}  // namespace actorflow
