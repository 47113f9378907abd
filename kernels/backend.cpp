// kernels/backend.cpp: choosing a backend by device.
#include "kernels/backend.h"

#include "base/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/sim/sim_backend.h"
#if RINGZERO_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace rz {

bool cuda_backend_built() {
#if RINGZERO_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(Device dev) {
  if (dev.is_cpu()) return make_cpu_backend();
  if (dev.kind == DeviceKind::sim) return make_sim_backend(dev.index);
#if RINGZERO_HAVE_CUDA
  return make_cuda_backend(dev.index);
#else
  fail(strfmt("device %s: this build has no CUDA backend (rebuild with nvcc installed, or "
              "-DRINGZERO_CUDA=ON)",
              device_name(dev).c_str()));
#endif
}

Backend& cpu_backend() {
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  return *cpu;
}

}  // namespace rz
