// comm/nccl/nccl_calls_none.cpp: the nccl entry points in an executable without NCCL (a
// build without it, or the tests' CUDA-on-CPU emulated binaries, where NCCL never runs):
// every one says so in one line. comm/CMakeLists.txt links this or nccl_calls_cuda.cpp.
#include "base/check.h"
#include "comm/nccl/nccl_calls.h"
#include "comm/nccl/nccl_communicator.h"

namespace rz {

bool nccl_backend_built() { return false; }
std::string nccl_unavailable() {
  return "this ringzero was built without NCCL (it needs the CUDA toolkit with nccl.h and libnccl; CMake option "
         "RINGZERO_NCCL)";
}
int nccl_cuda_device_count(int) { RZ_FAIL("comm nccl: %s", nccl_unavailable().c_str()); }
std::unique_ptr<NcclCalls> make_cuda_nccl_calls() { RZ_FAIL("comm nccl: %s", nccl_unavailable().c_str()); }

}  // namespace rz
