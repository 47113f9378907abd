// tests/cuemu/runtime/api.cpp: the CUDA runtime calls of the CUDA-on-CPU emulator that are
// not memory (memory.cpp) or launches (scheduler.cpp): errors, devices, streams, events.
//
// Everything is synchronous: a copy or kernel has finished when its call returns, so a
// stream is only a handle (checked: a destroyed one is refused, where CUDA's behaviour is
// undefined), an event a timestamp taken at cudaEventRecord, and every wait returns at once.
// The emulated device count is 1, or RINGZERO_CUEMU_DEVICES (1..8) for tests of placement;
// each "device" is this host's memory.
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "internal.h"

struct CUstream_st {
  unsigned int flags;
  int device;
};
struct CUevent_st {
  unsigned int flags;
  bool recorded;
  std::chrono::steady_clock::time_point when;
};

namespace cuemu {
namespace {

thread_local cudaError_t t_last = cudaSuccess;
thread_local cudaError_t t_detail_code = cudaSuccess;
thread_local std::string t_detail;  // "<CUDA's text> (cuemu: ...)" for t_detail_code
thread_local int t_device = 0;
thread_local int t_blas_detail_code = 0;
thread_local std::string t_blas_detail;

std::mutex g_handles_mu;
std::set<const CUstream_st*> g_streams;
std::set<const CUevent_st*> g_events;

const char* base_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

bool live_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> l(g_handles_mu);
  return e != nullptr && g_events.count(e) > 0;
}

cudaError_t bad_event(const char* call, cudaEvent_t e) {
  return fail(cudaErrorInvalidResourceHandle, fmt("%s(%p): not a live event", call, static_cast<void*>(e)));
}

}  // namespace

std::string fmt(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  char buf[1024];
  const int n = std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  if (n < 0) return format;
  if (size_t(n) < sizeof buf) return std::string(buf, size_t(n));
  std::string s(size_t(n) + 1, '\0');
  va_start(ap, format);
  std::vsnprintf(s.data(), s.size(), format, ap);
  va_end(ap);
  s.resize(size_t(n));
  return s;
}

cudaError_t fail(cudaError_t e, std::string detail) {
  t_last = e;
  t_detail_code = e;
  t_detail = std::string(base_string(e)) + " (cuemu: " + detail + ")";
  return e;
}

void set_blas_detail(int status, std::string detail) {
  t_blas_detail_code = status;
  t_blas_detail = std::move(detail);
}
const char* blas_detail(int status) {
  return status == t_blas_detail_code && !t_blas_detail.empty() ? t_blas_detail.c_str() : nullptr;
}

int device_count() {
  static const int n = [] {
    const char* v = std::getenv("RINGZERO_CUEMU_DEVICES");
    const int k = v != nullptr ? std::atoi(v) : 1;
    return k >= 1 && k <= 8 ? k : 1;
  }();
  return n;
}
int current_device() { return t_device; }

const cudaDeviceProp& device_props() {
  static const cudaDeviceProp p = [] {
    cudaDeviceProp d{};
    std::snprintf(d.name, sizeof d.name, "ringzero cuemu: CUDA on the CPU, tests only");
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    d.totalGlobalMem = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(16) << 30;
    d.sharedMemPerBlock = 48 << 10;
    d.sharedMemPerBlockOptin = 227 << 10;  // H100's opt-in limit
    d.regsPerBlock = 65536;
    d.warpSize = 32;
    d.maxThreadsPerBlock = 1024;
    d.maxThreadsDim[0] = 1024;
    d.maxThreadsDim[1] = 1024;
    d.maxThreadsDim[2] = 64;
    d.maxGridSize[0] = 0x7fffffff;
    d.maxGridSize[1] = 65535;
    d.maxGridSize[2] = 65535;
    d.multiProcessorCount = 132;
    d.major = 9;
    d.minor = 0;
    return d;
  }();
  return p;
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr) return true;
  std::lock_guard<std::mutex> l(g_handles_mu);
  return g_streams.count(s) > 0;
}

}  // namespace cuemu

using cuemu::fail;
using cuemu::fmt;

cudaError_t cudaGetLastError() {
  const cudaError_t e = cuemu::t_last;
  cuemu::t_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return cuemu::t_last; }

const char* cudaGetErrorString(cudaError_t e) {
  if (e == cuemu::t_detail_code && !cuemu::t_detail.empty()) return cuemu::t_detail.c_str();
  return cuemu::base_string(e);
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
  *count = cuemu::device_count();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= cuemu::device_count())
    return fail(cudaErrorInvalidDevice, fmt("cudaSetDevice(%d): the emulator has %d device(s)", device,
                                            cuemu::device_count()));
  cuemu::t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice: null device");
  *device = cuemu::t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null properties");
  if (device < 0 || device >= cuemu::device_count())
    return fail(cudaErrorInvalidDevice, fmt("cudaGetDeviceProperties(%d): the emulator has %d device(s)", device,
                                            cuemu::device_count()));
  *prop = cuemu::device_props();
  return cudaSuccess;
}
// Total: the host's memory; free: what this process's device allocations leave of it.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: null output");
  const size_t total = cuemu::device_props().totalGlobalMem, used = cuemu::device_bytes_in_use();
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamCreate: null stream");
  if (flags > cudaStreamNonBlocking) return fail(cudaErrorInvalidValue, fmt("cudaStreamCreateWithFlags: flags %u", flags));
  *stream = new CUstream_st{flags, cuemu::t_device};
  std::lock_guard<std::mutex> l(cuemu::g_handles_mu);
  cuemu::g_streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> l(cuemu::g_handles_mu);
    if (stream == nullptr || cuemu::g_streams.erase(stream) == 0)
      return fail(cudaErrorInvalidResourceHandle, fmt("cudaStreamDestroy(%p): not a live stream", static_cast<void*>(stream)));
  }
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!cuemu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, fmt("cudaStreamSynchronize(%p): not a live stream", static_cast<void*>(stream)));
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (!cuemu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, fmt("cudaStreamWaitEvent(%p): not a live stream", static_cast<void*>(stream)));
  if (!cuemu::live_event(event)) return cuemu::bad_event("cudaStreamWaitEvent", event);
  if (flags != 0) return fail(cudaErrorInvalidValue, fmt("cudaStreamWaitEvent: flags %u", flags));
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidValue, "cudaEventCreate: null event");
  if ((flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)) != 0)
    return fail(cudaErrorInvalidValue, fmt("cudaEventCreateWithFlags: flags %u", flags));
  *event = new CUevent_st{flags, false, {}};
  std::lock_guard<std::mutex> l(cuemu::g_handles_mu);
  cuemu::g_events.insert(*event);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard<std::mutex> l(cuemu::g_handles_mu);
    if (event == nullptr || cuemu::g_events.erase(event) == 0) return cuemu::bad_event("cudaEventDestroy", event);
  }
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!cuemu::live_event(event)) return cuemu::bad_event("cudaEventRecord", event);
  if (!cuemu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle, fmt("cudaEventRecord on stream %p: not a live stream", static_cast<void*>(stream)));
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}
// CUDA: success for an event that was never recorded, too.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return cuemu::live_event(event) ? cudaSuccess : cuemu::bad_event("cudaEventQuery", event);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return cuemu::live_event(event) ? cudaSuccess : cuemu::bad_event("cudaEventSynchronize", event);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null output");
  if (!cuemu::live_event(start)) return cuemu::bad_event("cudaEventElapsedTime", start);
  if (!cuemu::live_event(end)) return cuemu::bad_event("cudaEventElapsedTime", end);
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event created with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event that was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return fail(cudaErrorInvalidValue, fmt("cudaFuncSetAttribute: attribute %d is not emulated", int(attr)));
  if (value < 0 || size_t(value) > cuemu::device_props().sharedMemPerBlockOptin)
    return fail(cudaErrorInvalidValue, fmt("cudaFuncSetAttribute: %d bytes of dynamic shared memory (at most %zu)",
                                           value, cuemu::device_props().sharedMemPerBlockOptin));
  cuemu::set_dynamic_shared_limit(kernel, size_t(value));
  return cudaSuccess;
}
