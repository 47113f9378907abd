// kernels/device_provider.h: what implements a device kind in this executable.
//
// Why: which code stands behind `--device cuda` is decided when an executable is linked,
// not when its libraries are compiled. The ringzero binary links the CUDA runtime's
// provider (kernels/cuda/cuda_backend.cu, built by nvcc), or the one that says this build
// has no CUDA (kernels/cuda_none.cpp); the tests' emulated binaries link the same
// cuda_backend.cu compiled as C++ against the CUDA-on-CPU emulator (tests/cuemu). Exactly
// one provider is linked into each executable (kernels/CMakeLists.txt chooses it by the
// target's RINGZERO_CUDA_RUNTIME property), so the same libraries (model, strategies,
// trainer) serve all three and no product code asks which it is. ggml's backend reg
// (a name, a device count, a device's backend) is the model; the registry of every kind
// (cpu, cuda, sim) is kernels/registry/device_registry.h, whose rows are DeviceProviders.
#pragma once

#include <memory>
#include <string>

namespace rz {

class Backend;

struct DeviceProvider {
  // "" when this process can use the kind; else why not, in one line (never throws).
  std::string (*unavailable)();
  // Devices this process sees; 0 when unavailable.
  int (*device_count)();
  // The op table on device `index`; fails with one line naming the cause (no such device,
  // no driver, a build without the kind).
  std::unique_ptr<Backend> (*make_backend)(int index);
};

// The cuda kind's provider, defined by the one provider linked into this executable.
const DeviceProvider& cuda_provider();

}  // namespace rz
