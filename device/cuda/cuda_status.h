// CUDA, cuBLAS and cuDNN return codes as actorflow Status values, and macros that return
// early on failure. Nothing here aborts: every failing call becomes an error that names the
// call (the kernel layer prefixes the op: "MatMul 'c': cublasSgemm(...) failed: ...").
// Thread-safe (pure functions).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/status.h"

namespace actorflow {

// OK for cudaSuccess; otherwise ResourceExhausted for out-of-memory, Unavailable for a
// missing/lost device or driver, Internal for the rest, with the message
// "<what> failed: <cudaGetErrorString> (<cudaGetErrorName>)". Clears the thread's last
// CUDA error so it does not leak into the next check.
Status cuda_status(cudaError_t e, const char* what);
// OK for CUBLAS_STATUS_SUCCESS, else "<what> failed: <name>" (ResourceExhausted for
// CUBLAS_STATUS_ALLOC_FAILED, Internal otherwise).
Status cublas_status(cublasStatus_t s, const char* what);
// OK for CUDNN_STATUS_SUCCESS, else "<what> failed: <cudnnGetErrorString>" (ResourceExhausted
// for CUDNN_STATUS_ALLOC_FAILED, InvalidArgument for bad parameters / not supported,
// Internal otherwise).
Status cudnn_status(cudnnStatus_t s, const char* what);
// The launch status of the last kernel launched from this thread ("launching <what>").
Status cuda_launch_status(const char* what);

}  // namespace actorflow

#define AF_CUDA_RETURN_IF_ERROR(expr) AF_RETURN_IF_ERROR(::actorflow::cuda_status((expr), #expr))
#define AF_CUBLAS_RETURN_IF_ERROR(expr) AF_RETURN_IF_ERROR(::actorflow::cublas_status((expr), #expr))
#define AF_CUDNN_RETURN_IF_ERROR(expr) AF_RETURN_IF_ERROR(::actorflow::cudnn_status((expr), #expr))
// After a <<<...>>> launch: returns the launch error, naming `what`.
#define AF_CUDA_RETURN_IF_LAUNCH_ERROR(what) AF_RETURN_IF_ERROR(::actorflow::cuda_launch_status(what))
