// comm/nccl/nccl_calls_cuda.cpp: the library's row of the nccl backend's call table
// (comm/nccl/nccl_calls.h): every entry is the NCCL or CUDA runtime call it names. Built with
// NCCL (RINGZERO_NCCL).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "base/check.h"
#include "comm/transport/device_ops.h"
#include "comm/nccl/nccl_calls.h"
#include "comm/nccl/nccl_communicator.h"

namespace rz {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "comm/rendezvous/nccl_id.h: kNcclIdBytes is not sizeof(ncclUniqueId)");

bool nccl_backend_built() { return true; }

std::string nccl_unavailable() { return comm_cuda::devices_unavailable(); }

int nccl_cuda_device_count(int rank) {
  int n = 0;
  const std::string why = comm_cuda::devices_unavailable(&n);
  RZ_CHECK(why.empty(), "comm nccl: rank %d: %s", rank, why.c_str());
  return n;
}

namespace {

ncclDataType_t nccl_type(DType t) { return t == DType::bf16 ? ncclBfloat16 : ncclFloat32; }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }

std::string cuda_error(cudaError_t e) { return e == cudaSuccess ? std::string() : cudaGetErrorString(e); }

// NCCL's answer with its error string and, where a communicator exists, its last-error detail.
NcclStatus status(ncclResult_t r, void* comm) {
  if (r == ncclSuccess) return NcclStatus::ok();
  if (r == ncclInProgress) return NcclStatus::pending();
  const char* last = comm != nullptr ? ncclGetLastError(as_comm(comm)) : nullptr;
  return NcclStatus::fail(std::string(ncclGetErrorString(r)) + (last != nullptr && *last != 0 ? ": " : "") +
                          (last != nullptr ? last : ""));
}

class CudaNcclCalls final : public NcclCalls {
 public:
  std::string set_device(int device) override { return cuda_error(cudaSetDevice(device)); }
  std::string stream_create(void** stream) override {
    cudaStream_t s = nullptr;
    const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    *stream = s;
    return cuda_error(e);
  }
  void stream_destroy(void* stream) override { (void)cudaStreamDestroy(as_stream(stream)); }
  std::string event_create(void** event) override {
    cudaEvent_t ev = nullptr;
    const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    *event = ev;
    return cuda_error(e);
  }
  void event_destroy(void* event) override { (void)cudaEventDestroy(as_event(event)); }
  std::string event_record(void* event, void* stream) override {
    return cuda_error(cudaEventRecord(as_event(event), as_stream(stream)));
  }
  std::string stream_wait_event(void* stream, void* event) override {
    return cuda_error(cudaStreamWaitEvent(as_stream(stream), as_event(event), 0));
  }
  bool event_query(void* event, std::string* error) override {
    const cudaError_t q = cudaEventQuery(as_event(event));
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) *error = cudaGetErrorString(q);
    return false;
  }
  std::string malloc(void** p, size_t bytes) override { return cuda_error(cudaMalloc(p, bytes)); }
  void free(void* p) override { (void)cudaFree(p); }
  std::string malloc_async(void** p, size_t bytes, void* stream) override {
    return cuda_error(cudaMallocAsync(p, bytes, as_stream(stream)));
  }
  void free_async(void* p, void* stream) override { (void)cudaFreeAsync(p, as_stream(stream)); }
  std::string memcpy_async(void* dst, const void* src, size_t bytes, void* stream) override {
    return cuda_error(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)));
  }
  std::string copy_to_device_async(void* dst, const void* host_src, size_t bytes, void* stream) override {
    return cuda_error(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
  }
  std::string copy_to_host_async(void* host_dst, const void* src, size_t bytes, void* stream) override {
    return cuda_error(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
  }
  std::string memset_async(void* dst, int value, size_t bytes, void* stream) override {
    return cuda_error(cudaMemsetAsync(dst, value, bytes, as_stream(stream)));
  }
  bool is_device_memory(const void* p) override {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    return e == cudaSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
  }
  void divide_by(void* buf, size_t n, DType dt, int N, void* stream) override {
    comm_cuda::divide_by(buf, n, dt, N, as_stream(stream));
  }

  NcclStatus get_unique_id(NcclIdBytes* id) override {
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    std::memcpy(id->data(), &u, sizeof u);
    return status(r, nullptr);
  }
  NcclStatus comm_init_rank(void** comm, int nranks, const NcclIdBytes& id, int rank) override {
    ncclUniqueId u;
    std::memcpy(&u, id.data(), sizeof u);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once (NcclCommunicator bounds each wait)
    ncclComm_t c = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&c, nranks, u, rank, &config);
    *comm = c;
    return status(r, c);
  }
  NcclStatus all_reduce(const void* in, void* out, size_t count, DType dt, void* comm, void* stream) override {
    return status(ncclAllReduce(in, out, count, nccl_type(dt), ncclSum, as_comm(comm), as_stream(stream)), comm);
  }
  NcclStatus reduce_scatter(const void* in, void* out, size_t recv_count, DType dt, void* comm, void* stream) override {
    return status(ncclReduceScatter(in, out, recv_count, nccl_type(dt), ncclSum, as_comm(comm), as_stream(stream)),
                  comm);
  }
  NcclStatus all_gather(const void* in, void* out, size_t send_count, DType dt, void* comm, void* stream) override {
    return status(ncclAllGather(in, out, send_count, nccl_type(dt), as_comm(comm), as_stream(stream)), comm);
  }
  NcclStatus broadcast(const void* in, void* out, size_t count, DType dt, int root, void* comm, void* stream) override {
    return status(ncclBroadcast(in, out, count, nccl_type(dt), root, as_comm(comm), as_stream(stream)), comm);
  }
  NcclStatus async_error(void* comm) override {
    ncclResult_t st = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(as_comm(comm), &st);
    return status(q != ncclSuccess ? q : st, comm);
  }
  NcclStatus finalize(void* comm) override { return status(ncclCommFinalize(as_comm(comm)), comm); }
  NcclStatus destroy(void* comm) override { return status(ncclCommDestroy(as_comm(comm)), nullptr); }
  void abort(void* comm) override { (void)ncclCommAbort(as_comm(comm)); }
};

}  // namespace

std::unique_ptr<NcclCalls> make_cuda_nccl_calls() { return std::make_unique<CudaNcclCalls>(); }

}  // namespace rz
