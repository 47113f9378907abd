// comm/transport/cuda_ring_none.cpp: the cuda transport's GPU side in a build without CUDA
// (device_ring.h): the simulated device still works; a GPU is one line saying why not.
// comm/CMakeLists.txt links this or cuda_ring.cpp.
#include "base/check.h"
#include "comm/transport/device_ring.h"

namespace rz {

std::string cuda_ring_unavailable() {
  return "this ringzero was built without CUDA (the ring's cuda transport needs nvcc; CMake option RINGZERO_CUDA)";
}
int cuda_ring_device_for(const RankEnv& env, const CommOptions& opts) {
  if (opts.device.kind == DeviceKind::sim) return sim_ring_device_for(env, opts);
  RZ_FAIL("comm ring, cuda transport: %s", cuda_ring_unavailable().c_str());
}
std::shared_ptr<DeviceLink> make_cuda_link(const RankEnv&, const CommOptions&, size_t) {
  RZ_FAIL("comm ring, cuda transport: %s", cuda_ring_unavailable().c_str());
}

}  // namespace rz
