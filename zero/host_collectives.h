// zero/host_collectives.h: collectives on small host arrays -- the loss, the stop and save
// votes, the clip norm's partials, the memory report, the trace -- over any communicator.
//
// Why: these values are born and used on the host, but with --comm nccl every buffer must
// be device memory (NCCL refuses anything else), so handing them to the communicator as
// they are fails at step 1 on GPU ranks. Where the communicator takes host buffers (the
// ring, including its cuda transport's host channel, and mpi) they go as they are;
// otherwise they are staged through a small device buffer of the model's backend: copied
// up, reduced or gathered there (the collective is blocking, and follows the compute
// stream), copied back.
#pragma once

#include <cstddef>

#include "base/memory.h"
#include "comm/communicator.h"
#include "kernels/backend.h"

namespace rz {

class HostCollectives {
 public:
  HostCollectives(Communicator& comm, Backend& backend);

  // x (n) fp32 on the host, reduced across ranks in place.
  void all_reduce(float* x, size_t n, ReduceOp op);
  // all (count) fp32 on the host: this rank's shard_of(count, N, rank) elements are read
  // from `mine` (which may lie in `all` at the shard's offset) and all of them come back.
  void all_gather(const float* mine, float* all, size_t count);

  Communicator& comm() { return comm_; }
  // True when the values are staged through device memory (the communicator wants it).
  bool staged() const { return !direct_; }

 private:
  float* stage(size_t n);

  Communicator& comm_;
  Backend& be_;
  const bool direct_;
  Buffer<float> stage_;  // (grow-only) on the backend's device, MemTag::workspace
};

}  // namespace rz
