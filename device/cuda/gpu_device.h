// GpuDevice: one CUDA GPU of this process as an actorflow Device. It owns (RAII) its
// compute stream, cuBLAS and cuDNN handles, pinned host staging buffer and BFC allocator.
// Kernels reach it through OpKernelContext::device() (see gpu_kernel.h).
//
// All work of a device is queued on its one stream, in order, so a buffer freed to the BFC
// allocator may be reused by the next kernel at once. The host<->device copies wait for the
// stream, so a tensor returned by copy_to_host() holds the finished values.
//
// Thread-safety: copies, sync() and the allocator are thread-safe; cuBLAS/cuDNN calls must
// hold library_mutex() (GpuOpKernel does this for its kernels). Destroy the device only
// after every tensor allocated on it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "device/bfc_allocator.h"
#include "device/device.h"

namespace actorflow {

// The properties of a CUDA device needed for naming and limits.
struct GpuInfo {
  int ordinal = 0;              // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;             // "NVIDIA A100-SXM4-40GB"
  std::string pci_bus_id;       // "0000:02:00.0"
  int cc_major = 0, cc_minor = 0;
  int64_t total_bytes = 0, free_bytes = 0;
};

// TensorFlow's device description: "device: 0, name: <name>, pci bus id: <id>, compute
// capability: 8.0".
std::string gpu_description(const GpuInfo& info);

namespace cuda_detail {
struct StreamDeleter { int ordinal; void operator()(CUstream_st* s) const; };
struct CublasDeleter { int ordinal; void operator()(cublasContext* h) const; };
struct CudnnDeleter { int ordinal; void operator()(cudnnContext* h) const; };
struct PinnedDeleter { void operator()(void* p) const; };
}  // namespace cuda_detail

class GpuDevice final : public Device {
 public:
  // Creates the device `full_name` (index `index` among this task's GPUs) on CUDA device
  // info.ordinal with an allocator limited per `opts`. Errors name the device and the CUDA
  // call; ResourceExhausted when the memory cannot be reserved.
  static Result<std::unique_ptr<GpuDevice>> create(const std::string& full_name, int index, const GpuInfo& info,
                                                   const DeviceEnumerationOptions& opts);
  // Waits for the stream, then releases handles, the stream and the device memory.
  ~GpuDevice() override;

  Allocator* allocator() override { return allocator_.get(); }
  // Device -> host through the pinned staging buffer (cudaMemcpyAsync on the stream, then a
  // stream sync). A host tensor is returned as is; a tensor of another device is an error.
  Result<Tensor> copy_to_host(const Tensor& t) override;
  // Host -> device through the pinned staging buffer. A tensor already on this device is
  // returned as is.
  Result<Tensor> copy_from_host(const Tensor& t) override;
  // Waits for all work queued on the stream.
  Status sync() override;
  // A device-to-device copy (queued on the stream) of a tensor of this device, or a
  // host-to-device copy of a host tensor; InvalidArgument for another device's tensor.
  Result<Tensor> duplicate(const Tensor& t) override;
  // The gpu_apply_* updates of device/cuda/optimizer_kernels.h (float32 or float64), queued
  // on the stream; errors say which operand is wrong.
  Status apply_dense_update(const DenseUpdate& u, Tensor& w, Tensor* s1, Tensor* s2, const Tensor& g) override;

  // Makes this device current for the calling thread (cudaSetDevice).
  Status activate() const;
  const GpuInfo& info() const { return info_; }
  int ordinal() const { return info_.ordinal; }
  cudaStream_t stream() const { return stream_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  // Serialises cuBLAS/cuDNN use (their handles are not thread-safe).
  std::mutex& library_mutex() { return lib_mu_; }
  BFCAllocator* bfc() { return allocator_.get(); }

 private:
  GpuDevice(DeviceAttributes attrs, GpuInfo info) : Device(std::move(attrs)), info_(std::move(info)) {}
  Status apply_dense_update_unprofiled(const DenseUpdate& u, Tensor& w, Tensor* s1, Tensor* s2, const Tensor& g);
  // Copies `bytes` between host memory and device memory in staging-sized chunks.
  Status staged_copy(void* dst, const void* src, size_t bytes, bool to_device);

  GpuInfo info_;
  // Declaration order is destruction order reversed: the allocator (device memory) goes last.
  std::unique_ptr<BFCAllocator> allocator_;
  std::unique_ptr<CUstream_st, cuda_detail::StreamDeleter> stream_{nullptr, {0}};
  std::unique_ptr<cublasContext, cuda_detail::CublasDeleter> cublas_{nullptr, {0}};
  std::unique_ptr<cudnnContext, cuda_detail::CudnnDeleter> cudnn_{nullptr, {0}};
  std::mutex lib_mu_;
  std::mutex staging_mu_;
  std::unique_ptr<void, cuda_detail::PinnedDeleter> staging_;
  size_t staging_bytes_ = 0;
};

}  // namespace actorflow
