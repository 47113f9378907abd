// kernels/cuda_none.cpp: the cuda kind's provider in a build without the CUDA backend
// (kernels/device_provider.h): no device, and one line saying why.
#include "base/check.h"
#include "kernels/backend.h"
#include "kernels/device_provider.h"

namespace rz {

const DeviceProvider& cuda_provider() {
  static const DeviceProvider none{
      [] {
        return std::string("this build has no CUDA backend (rebuild with nvcc installed, or -DRINGZERO_CUDA=ON)");
      },
      [] { return 0; },
      nullptr,
  };
  return none;
}

}  // namespace rz
