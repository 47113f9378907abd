// kernels/registry/device_registry.cpp: the rows of the device kinds (device_registry.h).
#include "kernels/registry/device_registry.h"

#include "base/check.h"
#include "base/sim_device.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/sim/sim_backend.h"

namespace rz {
namespace {

const DeviceProvider kCpu{
    [] { return std::string(); },
    [] { return 1; },
    [](int) { return make_cpu_backend(); },
};

const DeviceProvider kSim{
    [] { return std::string(); },
    [] { return sim::kDeviceCount; },
    [](int index) { return make_sim_backend(index); },
};

}  // namespace

const DeviceProvider& device_kind_provider(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return kCpu;
    case DeviceKind::sim: return kSim;
    case DeviceKind::cuda: return cuda_provider();
  }
  RZ_FAIL("device kind %d: not registered", static_cast<int>(kind));
}

std::unique_ptr<Backend> make_backend(Device dev) {
  const DeviceProvider& p = device_kind_provider(dev.kind);
  if (p.make_backend == nullptr) fail(strfmt("device %s: %s", device_name(dev).c_str(), p.unavailable().c_str()));
  return p.make_backend(dev.index);
}

}  // namespace rz
