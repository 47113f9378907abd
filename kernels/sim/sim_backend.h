// kernels/sim/sim_backend.h: the simulated device's backend (`--device sim`, for tests).
//
// A table, not a second set of kernels: every op checks that each pointer it receives is
// simulated-device memory of the op's size (base/sim_device.h; "host" arguments must lie
// outside it), translates it to the arena's read-write view and calls the CPU backend's
// op of the same name. So results are the CPU backend's bitwise, and any difference, or
// any failure, is a host/device discipline bug of the caller: a host pointer handed to an
// op fails with the op's and the argument's name; host code that reads a device pointer
// faults at that line (the arena's PROT_NONE view).
//
// Streams, as on a GPU: compute runs on the calling thread and has finished when an op
// returns (a blocking stream that is always synchronized, so marks of it are null). Under
// a StreamScope the copy, zero and accumulate_* calls are queued on the scope's stream,
// which on this device is a sim::Stream (the simulated NCCL's comm stream), exactly the
// ops the CUDA backend queues there; mark(stream) is a point on it and wait_for() waits
// for that point on the host (which is where this device's compute runs).
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace rz {

std::unique_ptr<Backend> make_sim_backend(int index);

}  // namespace rz
