// base/sim_device.h: the simulated device (`--device sim`), a test-facing stand-in for a GPU
// that makes host/device mix-ups fail on a CPU exactly where a GPU would crash.
//
// Why: on the CPU backend a "device" pointer is a host pointer, so host code that reads
// device memory, or a host pointer handed to a device op, works in CPU-only CI and crashes
// on the first GPU run. The simulated device closes that class of defect:
//   arena    one memfd mapped twice per process: a PROT_NONE view whose addresses are
//            handed out as device pointers, and a read-write view at another address that
//            only the simulated device's own code (kernels/sim, the simulated comm calls)
//            reaches, through host_view(). A host read or write of a device pointer
//            faults; the SIGSEGV handler installed with the arena prints one line naming
//            the simulated device and the address, then aborts. Protection is set once
//            and never toggled, so rank threads and comm threads can run at any time.
//   checks   host_view(p, bytes, op, arg) is how every op reaches its operands: p must lie
//            in one live allocation (or a mapped peer's shared range) with all `bytes`, or
//            it throws rz::Error naming the op and the argument. check_host() is the
//            converse, for arguments the op table calls "host".
//   streams  Stream: an in-order queue of work run by its own thread, with tickets as
//            events (a CUDA stream's contract). The simulated backend's compute runs on
//            the calling thread, like a blocking stream that is always synchronized.
//   sharing  a live range shared with another process (the cuda transport's inbox): a
//            handle naming this process's memfd, which the peer maps twice the same way.
// base/ knows no backend: kernels/sim builds the op table on this, comm/ its simulated
// NCCL and cuda-transport calls. Nothing here is for speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace rz::sim {

// Device ordinals sim:0 .. sim:7 all share this process's one arena (a rank's device index
// only says which GPU it would have been).
constexpr int kDeviceCount = 8;
// Every device allocation starts at a multiple of this (cudaMalloc's alignment).
constexpr size_t kAlignment = 256;

// --- memory -------------------------------------------------------------------------------
// Zero-filled device memory of `bytes` (> 0) bytes; throws rz::Error when the arena
// (RINGZERO_SIM_MEMORY bytes, default 64 GiB of address space, backed only where used) is full.
void* device_alloc(size_t bytes);
void device_free(void* p);  // p from device_alloc; anything else is an rz::Error
// Makes Buffers on sim:K come from device_alloc (base/memory.h's register_device_allocator), as
// the CUDA backend registers cudaMalloc: the sim backend (kernels/sim) and the simulated comm
// links call it when they are made. Idempotent.
void register_allocator();
// Bytes in live allocations, and the arena's size (the simulated driver_memory).
size_t device_bytes_in_use();
size_t device_capacity();

// True when p lies anywhere in a device view (live or freed memory, a peer's range).
bool is_device_address(const void* p);
// The read-write view of [p, p + bytes) of device memory. Throws rz::Error
//   "<op>: <arg> (0x...) is not simulated-device memory (...)" for a host pointer,
//   "... lies in freed simulated-device memory" and "... runs past its allocation" too.
// bytes == 0 returns p unchanged and checks nothing (the op will not touch it).
void* host_view(const void* p, size_t bytes, const char* op, const char* arg);
// For an argument that must be host memory: throws when [p, p + bytes) touches a device view.
void check_host(const void* p, size_t bytes, const char* op, const char* arg);

// --- sharing a range with another process -------------------------------------------------
struct ShareHandle {
  int32_t pid = 0;       // the owner process
  int32_t fd = -1;       // its arena memfd (opened through /proc/<pid>/fd/<fd>)
  uint64_t inode = 0;    // checked against the file the peer opened
  uint64_t offset = 0;   // of the range in the owner's arena
  uint64_t bytes = 0;
  uint64_t address = 0;  // the range's device address in the owner (a peer in the same process uses it)
};
// [p, p + bytes) must lie in one live allocation.
ShareHandle share(const void* p, size_t bytes);
// The device address of the shared range in this process: the owner's own address when
// h.pid is this process, else a fresh mapping (both views) of the owner's memfd.
void* open_shared(const ShareHandle& h);
void close_shared(void* p);  // a mapping open_shared made (the owner's own address: nothing)

// --- streams --------------------------------------------------------------------------------
// An in-order queue of host closures run by one thread: what is enqueued runs after
// everything enqueued before it. record() returns a ticket that is done when all work
// enqueued so far has run. An exception from a closure is kept (error()) and the stream
// goes on with the next one.
class Stream {
 public:
  Stream();
  ~Stream();  // runs what is queued, then joins
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(std::function<void()> work);
  uint64_t record();
  bool done(uint64_t ticket);
  void wait(uint64_t ticket);
  void synchronize() { wait(record()); }
  std::exception_ptr error();

 private:
  void main();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0, completed_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

// A point on a stream: what Backend::mark returns and NCCL's events are, on this device.
struct StreamMark {
  Stream* stream = nullptr;  // null: the compute stream, always finished
  uint64_t ticket = 0;
  bool done() const { return stream == nullptr || stream->done(ticket); }
  void wait() const {
    if (stream != nullptr) stream->wait(ticket);
  }
};

}  // namespace rz::sim
