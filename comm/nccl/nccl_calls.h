// comm/nccl/nccl_calls.h: the NCCL and CUDA runtime calls the nccl backend makes, as a table.
//
// Why a table: `--comm nccl` runs only where there are GPUs, so its own logic (the padding
// of uneven counts, avg, the input-stream event, the watchdog, every error path) could
// not run in CI at all. NcclCommunicator (nccl_communicator.cpp) is therefore written once
// over this table, which has two rows:
//   cuda  (nccl_calls_cuda.cpp, built with NCCL) every entry is the library call it names;
//   sim   (nccl_calls_sim.cpp, always built) the same contract on the simulated device
//         (base/sim_device.h, `--device sim`): pointers must be simulated-device memory,
//         streams are sim::Streams that run their work in order on their own thread,
//         events are points on them, the communicator initialises asynchronously, and
//         each collective runs, on its stream, as a host ring collective (the ring's
//         thread, shm or tcp transport) over the arena's read-write view. A failed
//         collective leaves its stream stuck, as a hung NCCL kernel does, until abort.
// Streams, events and communicators are opaque pointers (cudaStream_t, cudaEvent_t,
// ncclComm_t). A null stream is the legacy default stream: on the simulated device, the
// compute stream, whose work has always finished.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/rendezvous/nccl_id.h"

namespace rz {

// What an NCCL call answered.
struct NcclStatus {
  enum Code { success, in_progress, failed };
  Code code = success;
  std::string error;  // failed: the library's error string and its last-error detail
  static NcclStatus ok() { return {}; }
  static NcclStatus pending() { return {in_progress, ""}; }
  static NcclStatus fail(std::string why) { return {failed, std::move(why)}; }
};

class NcclCalls {
 public:
  virtual ~NcclCalls() = default;

  // --- CUDA runtime. Each returns "" on success, else the runtime's error string.
  virtual std::string set_device(int device) = 0;
  virtual std::string stream_create(void** stream) = 0;  // cudaStreamCreateWithFlags(.., NonBlocking)
  virtual void stream_destroy(void* stream) = 0;
  virtual std::string event_create(void** event) = 0;  // cudaEventCreateWithFlags(.., DisableTiming)
  virtual void event_destroy(void* event) = 0;
  virtual std::string event_record(void* event, void* stream) = 0;
  virtual std::string stream_wait_event(void* stream, void* event) = 0;
  // cudaEventQuery: true when the event has completed; false when it has not yet, with
  // *error set when the query itself failed (the stream hit an error).
  virtual bool event_query(void* event, std::string* error) = 0;
  virtual std::string malloc(void** p, size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual std::string malloc_async(void** p, size_t bytes, void* stream) = 0;
  virtual void free_async(void* p, void* stream) = 0;
  virtual std::string memcpy_async(void* dst, const void* src, size_t bytes, void* stream) = 0;  // device to device
  // Host memory to the device and back, queued on stream (--comm-debug's fingerprints); the
  // host bytes must stay put until the stream has passed the copy.
  virtual std::string copy_to_device_async(void* dst, const void* host_src, size_t bytes, void* stream) = 0;
  virtual std::string copy_to_host_async(void* host_dst, const void* src, size_t bytes, void* stream) = 0;
  virtual std::string memset_async(void* dst, int value, size_t bytes, void* stream) = 0;
  // cudaPointerGetAttributes says device (or managed) memory.
  virtual bool is_device_memory(const void* p) = 0;
  // buf[i] = buf[i] / N in fp32 (bf16 rounded once) on stream (comm/transport/device_ops.h); throws.
  virtual void divide_by(void* buf, size_t n, DType dt, int N, void* stream) = 0;

  // --- NCCL, on a non-blocking communicator (ncclConfig_t.blocking = 0). The collectives
  // reduce with ncclSum; counts are NCCL's (reduce_scatter: per rank; all_gather: sent).
  virtual NcclStatus get_unique_id(NcclIdBytes* id) = 0;
  virtual NcclStatus comm_init_rank(void** comm, int nranks, const NcclIdBytes& id, int rank) = 0;
  virtual NcclStatus all_reduce(const void* in, void* out, size_t count, DType dt, void* comm, void* stream) = 0;
  virtual NcclStatus reduce_scatter(const void* in, void* out, size_t recv_count, DType dt, void* comm,
                                    void* stream) = 0;
  virtual NcclStatus all_gather(const void* in, void* out, size_t send_count, DType dt, void* comm, void* stream) = 0;
  virtual NcclStatus broadcast(const void* in, void* out, size_t count, DType dt, int root, void* comm,
                               void* stream) = 0;
  virtual NcclStatus async_error(void* comm) = 0;  // ncclCommGetAsyncError
  virtual NcclStatus finalize(void* comm) = 0;
  virtual NcclStatus destroy(void* comm) = 0;
  virtual void abort(void* comm) = 0;
};

// The library's row (nccl_calls_cuda.cpp); without NCCL in the build, one line naming why.
std::unique_ptr<NcclCalls> make_cuda_nccl_calls();
// CUDA devices visible to this process; one line (naming rank) when none can be used.
int nccl_cuda_device_count(int rank);

// The simulated device's row over one rank's host ring communicator (the ranks' ring must
// be as many as the NCCL communicator's; comm_init_rank checks it).
std::unique_ptr<NcclCalls> make_sim_nccl_calls(std::unique_ptr<Communicator> host_ring);

}  // namespace rz
