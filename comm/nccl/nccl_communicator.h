// comm/nccl/nccl_communicator.h: the Communicator over NCCL (`--comm nccl`), for GPU ranks and
// multi-node GPU jobs.
//
// The same promises as the ring (communicator.h), on device buffers: the same shards
// (shard_of; a count that N does not divide goes through a padded device scratch, since
// NCCL's ReduceScatter and AllGather want equal shards), avg divides the finished sum by
// N in fp32 on the owner (a kernel after ncclSum; NCCL's own ncclAvg pre-multiplies each
// input by 1/N, which rounds differently), every wait is bounded by the timeout, and an
// error names the rank and the collective. NCCL picks its own algorithm, so fp32 results
// agree with the ring's to rounding, not bitwise; the byte counters hold what a
// bandwidth-optimal algorithm moves per rank, as for --comm mpi.
//
// How it runs: the communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL
// call can hang the caller. Each collective is enqueued on this rank's comm stream after
// an event on the input stream (CommOptions::cuda_stream; the legacy default stream when
// null, which orders it after all earlier work of blocking streams), and ends with an
// event: the Work handle. A watchdog thread completes the handles in issue order (running
// OnDone there), and polls ncclCommGetAsyncError: an NCCL error, or a handle that is not
// done within the timeout (a dead peer), aborts the communicator (ncclCommAbort) and fails
// every pending handle with a message naming the rank. Blocking calls are an async call
// plus its wait.
//
// The logic is written once over a table of NCCL and CUDA calls (comm/nccl/nccl_calls.h): the
// library's on GPUs, the simulated device's (--device sim) in CI, where it runs over the
// ring on CPU ranks. What has been run where: docs/gpu-comm.md.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/options.h"
#include "comm/rank_env.h"
#include "comm/nccl/nccl_calls.h"

namespace rz {

class StoreClient;

// True when this build has the NCCL backend (CMake option RINGZERO_NCCL).
bool nccl_backend_built();

// "" when --comm nccl can run here; else why not, in words (a build without NCCL, no CUDA
// driver or device). Never throws.
std::string nccl_unavailable();

// The GPU a rank uses: opts.device's ordinal (placed by the caller), checked against the
// visible device count (a sim device: the simulated device's). Fails with one line when
// there is no such device.
int nccl_device_for(const RankEnv& env, const CommOptions& opts);

// One rank of an NCCL communicator over env.world_size ranks. store is the rendezvous
// (null only for world size 1); keep_alive is held as long as the communicator (rank 0's
// store server). calls: the table it runs on; null for the library's (make_cuda_nccl_calls).
std::unique_ptr<Communicator> make_nccl_communicator(const RankEnv& env, const CommOptions& opts, StoreClient* store,
                                                     std::shared_ptr<void> keep_alive,
                                                     std::unique_ptr<NcclCalls> calls = nullptr);

}  // namespace rz
