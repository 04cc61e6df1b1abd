// The CUDA backend's registrar. Linking the CMake component actorflow::cuda (af_cuda) brings this
// object in through its anchor symbol (the component's link option -Wl,--undefined=...), and with
// it every GPU kernel and the CUDA device factory; a program that does not link the component
// links no CUDA library and logs nothing about CUDA.
#include "device/backends.h"
#include "device/cuda/cuda_device.h"

// Referenced only by the link option that pulls this object out of the static library.
extern "C" {
extern const int actorflow_cuda_backend_anchor;
const int actorflow_cuda_backend_anchor = 1;
}

namespace actorflow {
namespace {

const bool kRegistered = register_device_backend(DeviceBackend{"CUDA", register_gpu_kernels, create_cuda_devices});

}  // namespace
}  // namespace actorflow
