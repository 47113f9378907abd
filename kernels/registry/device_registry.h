// kernels/registry/device_registry.h: every device kind this executable can place a rank on.
//
// Why a registry: the kinds (cpu, cuda, sim) differ in what stands behind them, not in how a
// rank uses them. Each registers one row (ggml's reg/device split: a name, a device count, a
// device's backend), and everything above kernels/ asks the row instead of branching on the
// kind. The cuda row is whichever provider this executable links (kernels/device_provider.h:
// the CUDA runtime's, the CUDA-on-CPU emulator's in test binaries, or none), so the same
// libraries serve all three. The simulated device (`--device sim`, kernels/sim) registers
// like any other kind. train/rank_setup.h's place_rank is the one caller above kernels/: it
// picks the rank's ordinal from device_count and builds the rank's backend once.
//
// This room sits above cpu/, sim/ and cuda/ (it includes their makers; none includes it).
#pragma once

#include <memory>
#include <string>

#include "base/memory.h"
#include "kernels/device_provider.h"

namespace rz {

class Backend;

// The row of one device kind (cpu, cuda, sim): why this process cannot use it ("" when it
// can), how many devices it sees, and the op table on one of them.
const DeviceProvider& device_kind_provider(DeviceKind kind);

// The backend for a device (cpu, cuda:K, sim:K). Fails with one line naming the cause: a
// build without the CUDA backend, no driver, no device, or an index past the device count.
std::unique_ptr<Backend> make_backend(Device dev);

}  // namespace rz
