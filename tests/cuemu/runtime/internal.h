// tests/cuemu/runtime/internal.h: what the emulator's runtime files share (not part of the
// stand-in API that emulated code sees).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cuemu {

// --- errors (api.cpp) ------------------------------------------------------------------------
// Records `e` as the calling thread's last error, with the emulator's explanation, and
// returns it. cudaGetErrorString(e) then reads "<CUDA's text> (cuemu: <detail>)".
cudaError_t fail(cudaError_t e, std::string detail);
// The library status detail (cuBLASLt and cuBLAS stand-ins): the same, for their strings.
void set_blas_detail(int status, std::string detail);
const char* blas_detail(int status);

// printf into a std::string.
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));

// --- devices (api.cpp) -------------------------------------------------------------------------
int device_count();
int current_device();
const cudaDeviceProp& device_props();
bool valid_stream(cudaStream_t s);  // null (legacy default) or a live stream of this process

// --- memory (memory.cpp) -----------------------------------------------------------------------
enum class MemKind { device, pinned_host, peer_device };  // peer_device: a CUDA IPC mapping
struct Region {
  char* base = nullptr;
  size_t bytes = 0;
  MemKind kind = MemKind::device;
  int device = 0;
};
// The allocation (or IPC mapping) that holds p, if any (p == base + bytes counts: one past
// the end, as a pointer argument may be).
bool find_region(const void* p, Region* r);
// True when [p, p + bytes) lies inside one region a kernel may address (device memory,
// pinned host memory, or a peer's device memory mapped through IPC).
bool device_addressable(const void* p, size_t bytes);
// "0x... (byte 40 of a 400-byte device allocation)", or "0x... (not device memory)".
std::string describe_pointer(const void* p);
// Device bytes this process holds (cudaMemGetInfo).
size_t device_bytes_in_use();
// After a kernel: "" when every allocation's guard bytes after its end are intact, else
// which allocation a kernel wrote past (never under ASan, which reports the write itself).
std::string check_guards();

// --- the launch (scheduler.cpp) ----------------------------------------------------------------
// Dynamic shared memory a kernel may use: 48 KiB, or what cudaFuncSetAttribute allowed.
size_t dynamic_shared_limit(const void* kernel);
void set_dynamic_shared_limit(const void* kernel, size_t bytes);

}  // namespace cuemu
