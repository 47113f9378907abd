// kernels/backend.cpp: choosing a backend by device.
#include "kernels/backend.h"

#include "base/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_provider.h"
#include "kernels/sim/sim_backend.h"

namespace rz {

// The cuda kind is served by whichever provider this executable links
// (kernels/device_provider.h): the CUDA runtime's, the emulator's in tests, or none.
bool cuda_backend_built() { return cuda_provider().make_backend != nullptr; }

std::unique_ptr<Backend> make_backend(Device dev) {
  if (dev.is_cpu()) return make_cpu_backend();
  if (dev.kind == DeviceKind::sim) return make_sim_backend(dev.index);
  const DeviceProvider& cuda = cuda_provider();
  if (cuda.make_backend == nullptr)
    fail(strfmt("device %s: %s", device_name(dev).c_str(), cuda.unavailable().c_str()));
  return cuda.make_backend(dev.index);
}

Backend& cpu_backend() {
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  return *cpu;
}

}  // namespace rz
