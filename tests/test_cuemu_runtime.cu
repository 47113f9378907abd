// tests/test_cuemu_runtime.cu: the CUDA-on-CPU emulator itself (tests/cuemu/README.md),
// on toy kernels written for it. Built only against the emulator: its launches are
// rewritten like kernels/cuda's (tests/cuemu/rewrite_launches.cmake). What the emulated
// tests of the real kernels rely on is held here to known answers:
//   - warp shuffles: PTX's lane, width and clamp arithmetic, computed here from the
//     CUDA programming guide's words, not from the emulator's code; a partial mask;
//   - a shuffle is a barrier of its warp only: warps that shuffle a different number of
//     times (as the flash kernels' do) must not wait for each other;
//   - __syncthreads is a block barrier at which returned threads count as arrived;
//   - __shared__ is per block and starts undefined (NaN); dynamic shared memory;
//   - grids past 65535 blocks in x, 3-D coordinates;
// and what it must refuse or report, each naming where: a deadlock, a divergent
// __syncthreads, a shuffle reading a returned lane, launches past CUDA's limits (through
// CUDA_CHECK_LAUNCH, as the launchers check), a host pointer given to a kernel, a write
// past an allocation (under ASan: ASan's report at the kernel's line), copies of the wrong
// kind or size, a destroyed stream; and IPC between two processes.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/cuda_check.h"

namespace {

// --- kernels ------------------------------------------------------------------------------

enum Shuffle { kXor, kDown, kUp, kIdx };

// out[t] = lane t's shuffle of the value 100 + t with parameter b and width w.
__global__ void shuffle_kernel(int* out, int kind, int b, int width, unsigned mask) {
  const int t = threadIdx.x;
  if (!(mask >> (t % 32) & 1u)) return;
  const int v = 100 + t;
  int r = -1;
  switch (kind) {
    case kXor: r = __shfl_xor_sync(mask, v, b, width); break;
    case kDown: r = __shfl_down_sync(mask, v, unsigned(b), width); break;
    case kUp: r = __shfl_up_sync(mask, v, unsigned(b), width); break;
    case kIdx: r = __shfl_sync(mask, v, b, width); break;
  }
  out[t] = r;
}

// Warp w sums its lanes w + 1 times: warps reach different numbers of shuffles.
__global__ void uneven_warps_kernel(float* out) {
  const int warp = threadIdx.x / 32;
  float acc = 0.0f;
  for (int rep = 0; rep <= warp; ++rep) {
    float x = float(threadIdx.x % 32 + rep);
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    acc += x;
  }
  out[threadIdx.x] = acc;
}

// A block's sum in shared memory, tree order; threads at or past `live` return first.
__global__ void block_sum_kernel(float* out, const float* in, int live) {
  __shared__ float s[256];
  const int t = threadIdx.x;
  if (t >= live) return;  // returned threads count as arrived at the barriers below
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int stride = 128; stride > 0; stride /= 2) {
    if (t < stride && t + stride < live) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// What thread 0 finds in shared memory before anyone writes, then each block's own value.
__global__ void shared_per_block_kernel(float* first_seen, float* own) {
  __shared__ float cell;
  if (threadIdx.x == 0) first_seen[blockIdx.x] = cell;
  __syncthreads();
  if (threadIdx.x == 0) cell = float(blockIdx.x);
  __syncthreads();
  own[blockIdx.x * blockDim.x + threadIdx.x] = cell;
}

__global__ void dynamic_shared_kernel(float* out, int n) {
  extern __shared__ float smem[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) smem[i] = float(i % 4);  // sums stay exact
  __syncthreads();
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += smem[i];
  out[threadIdx.x] = acc;
}

__global__ void big_static_shared_kernel(float* out) {
  __shared__ float big[10000];  // 40000 bytes
  big[threadIdx.x] = 1.0f;
  out[threadIdx.x] = big[threadIdx.x];
}

// out[linear block][linear thread] = a code of all six coordinates.
__global__ void coords_kernel(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block * blockDim.x * blockDim.y * blockDim.z + thread] =
      threadIdx.x | threadIdx.y << 4 | threadIdx.z << 8 | blockIdx.x << 12 | blockIdx.y << 16 | blockIdx.z << 20;
}

__global__ void block_x_kernel(unsigned* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x;
}

// Votes over the lanes of a 40-thread block (a full warp and 8 lanes), and atomics from
// every thread of several blocks.
__global__ void vote_kernel(unsigned* ballot, int* any, int* all, float* total, int* count) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned mask = threadIdx.x < 32 ? 0xffffffffu : 0xffu;
  ballot[threadIdx.x] = __ballot_sync(mask, lane % 3 == 0);
  any[threadIdx.x] = __any_sync(mask, lane == 20);
  all[threadIdx.x] = __all_sync(mask, lane < 8);
  atomicAdd(total, 0.5f);
  atomicAdd(count, 1);
}

// Lanes 0-15 wait at a full-mask shuffle, lanes 16-31 at __syncthreads: nobody can move.
__global__ void deadlock_kernel(float* out) {
  float x = 1.0f;
  if (threadIdx.x % 32 < 16)
    x = __shfl_xor_sync(0xffffffffu, x, 1);
  else
    __syncthreads();
  out[threadIdx.x] = x;
}

// Half the warp returns; the other half shuffles with a full mask, reading returned lanes.
__global__ void half_warp_shuffle_kernel(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 16);
}

__global__ void divergent_sync_kernel(float* out) {
  if (threadIdx.x < 64) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void write_kernel(float* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = 1.0f;
}

// --- helpers ------------------------------------------------------------------------------

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) {
    REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, n * sizeof(T)) == cudaSuccess);
  }
  ~Dev() { (void)cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  void set(const std::vector<T>& h) {
    REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
};

// The launch's error and its text (cleared).
std::string last_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : std::string(cudaGetErrorString(e));
}

// The source lane CUDA's guide describes for lane `lane`, or the lane itself where the
// guide says the caller gets its own value. Written from the guide's prose:
//   xor   lane ^ b; a source in a later group of `width` lanes gives the own value
//   down  lane + b; past the end of the lane's group: the own value
//   up    lane - b; before the start of the lane's group: the own value
//   idx   the lane of the group numbered b modulo width
int expected_source(int kind, int lane, int b, int width) {
  const int group = lane / width * width;
  switch (kind) {
    case kXor: {
      const int s = lane ^ b;
      return s / width > lane / width ? lane : s;
    }
    case kDown: return lane + b < group + width ? lane + b : lane;
    case kUp: return lane - b >= group ? lane - b : lane;
    default: return group + b % width;
  }
}

}  // namespace

TEST_CASE("shuffles: every lane, width and offset against CUDA's rules", "[cuemu]") {
  Dev<int> out(32);
  for (int kind : {kXor, kDown, kUp, kIdx})
    for (int width : {32, 16, 8, 4, 2, 1})
      for (int b : {0, 1, 2, 3, 5, 8, 16, 31}) {
        CAPTURE(kind, width, b);
        shuffle_kernel<<<1, 32>>>(out.p, kind, b, width, 0xffffffffu);
        REQUIRE(last_error().empty());
        const std::vector<int> got = out.host();
        for (int lane = 0; lane < 32; ++lane) {
          CAPTURE(lane);
          CHECK(got[lane] == 100 + expected_source(kind, lane, b, width));
        }
      }
  // Lanes 0-15 alone, with their own mask: the other half never takes part.
  std::vector<int> none(32, -7);
  out.set(none);
  shuffle_kernel<<<1, 32>>>(out.p, kXor, 1, 32, 0x0000ffffu);
  REQUIRE(last_error().empty());
  const std::vector<int> got = out.host();
  for (int lane = 0; lane < 16; ++lane) CHECK(got[lane] == 100 + (lane ^ 1));
  for (int lane = 16; lane < 32; ++lane) CHECK(got[lane] == -7);
}

TEST_CASE("a shuffle waits for its own warp only: warps may shuffle different numbers of times", "[cuemu]") {
  Dev<float> out(128);
  uneven_warps_kernel<<<1, 128>>>(out.p);
  REQUIRE(last_error().empty());
  const std::vector<float> got = out.host();
  for (int t = 0; t < 128; ++t) {
    const int warp = t / 32;
    float want = 0.0f;
    for (int rep = 0; rep <= warp; ++rep) want += float(496 + 32 * rep);  // sum of lane + rep over 32 lanes
    CHECK(got[t] == want);
  }
}

TEST_CASE("__syncthreads is a block barrier; returned threads count as arrived", "[cuemu]") {
  const int blocks = 5, threads = 256;
  std::vector<float> in(size_t(blocks) * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i % 97);
  Dev<float> d_in(in.size()), d_out(blocks);
  d_in.set(in);
  for (int live : {256, 200, 1}) {
    CAPTURE(live);
    block_sum_kernel<<<blocks, threads>>>(d_out.p, d_in.p, live);
    REQUIRE(last_error().empty());
    const std::vector<float> got = d_out.host();
    for (int b = 0; b < blocks; ++b) {
      float want = 0.0f;
      for (int t = 0; t < live; ++t) want += in[size_t(b) * threads + t];
      CHECK(got[b] == want);
    }
  }
}

TEST_CASE("__shared__ is per block and starts undefined (NaN)", "[cuemu]") {
  const int blocks = 4, threads = 64;
  Dev<float> first(blocks), own(size_t(blocks) * threads);
  shared_per_block_kernel<<<blocks, threads>>>(first.p, own.p);
  REQUIRE(last_error().empty());
  for (float f : first.host()) CHECK(std::isnan(f));
  const std::vector<float> o = own.host();
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) CHECK(o[size_t(b) * threads + t] == float(b));
}

TEST_CASE("dynamic shared memory, its limit and the opt-in past 48 KiB", "[cuemu]") {
  Dev<float> out(64);
  dynamic_shared_kernel<<<2, 64, 1000 * sizeof(float)>>>(out.p, 1000);
  REQUIRE(last_error().empty());
  for (float f : out.host()) CHECK(f == 1500.0f);
  const size_t big = 16000 * sizeof(float);  // 64000 bytes
  dynamic_shared_kernel<<<1, 64, big>>>(out.p, 16000);
  const std::string refused = last_error();
  CHECK(refused.find("dynamic shared memory") != std::string::npos);
  REQUIRE(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)) ==
          cudaSuccess);
  dynamic_shared_kernel<<<1, 64, big>>>(out.p, 16000);
  REQUIRE(last_error().empty());
  CHECK(out.host()[0] == 24000.0f);
  // 40000 bytes of static shared memory and 10000 of dynamic: more than a block's 48 KiB.
  big_static_shared_kernel<<<1, 32, 10000>>>(out.p);
  CHECK(last_error().find("static and 10000 of dynamic shared memory") != std::string::npos);
}

TEST_CASE("coordinates in three dimensions, and a grid of 70000 blocks in x", "[cuemu]") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  Dev<unsigned> out(size_t(12) * 24);
  coords_kernel<<<grid, block>>>(out.p);
  REQUIRE(last_error().empty());
  const std::vector<unsigned> got = out.host();
  size_t i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx)
              CHECK(got[i++] == (tx | ty << 4 | tz << 8 | bx << 12 | by << 16 | bz << 20));
  Dev<unsigned> blocks(70000);
  block_x_kernel<<<70000, 32>>>(blocks.p);
  REQUIRE(last_error().empty());
  const std::vector<unsigned> b = blocks.host();
  for (unsigned x = 0; x < 70000; ++x) REQUIRE(b[x] == x);
}

TEST_CASE("warp votes over full and partial warps; atomics", "[cuemu]") {
  Dev<unsigned> ballot(40);
  Dev<int> any(40), all(40), count(1);
  Dev<float> total(1);
  vote_kernel<<<3, 40>>>(ballot.p, any.p, all.p, total.p, count.p);
  REQUIRE(last_error().empty());
  const auto b = ballot.host();
  const auto a = any.host(), l = all.host();
  for (int t = 0; t < 40; ++t) {
    CAPTURE(t);
    CHECK(b[t] == (t < 32 ? 0x49249249u : 0x49u));  // lanes 0, 3, 6, ... (of 32, or of 8)
    CHECK(a[t] == (t < 32 ? 1 : 0));                 // lane 20 is only in the full warp
    CHECK(l[t] == (t < 32 ? 0 : 1));                 // only the partial warp has all lanes < 8
  }
  CHECK(total.host()[0] == 60.0f);
  CHECK(count.host()[0] == 120);
}

TEST_CASE("a deadlock names the barriers the threads wait at", "[cuemu]") {
  Dev<float> out(64);
  deadlock_kernel<<<1, 64>>>(out.p);
  const std::string e = last_error();
  INFO(e);
  CHECK(e.find("unspecified launch failure") != std::string::npos);
  CHECK(e.find("deadlock") != std::string::npos);
  CHECK(e.find("deadlock_kernel") != std::string::npos);
  CHECK(e.find("wait at __shfl_xor_sync(mask 0xffffffff) at tests/test_cuemu_runtime.cu:") != std::string::npos);
  CHECK(e.find("wait at __syncthreads at tests/test_cuemu_runtime.cu:") != std::string::npos);
  // The emulator goes on: the next launch runs.
  write_kernel<<<1, 32>>>(out.p, 64);
  CHECK(last_error().empty());
}

TEST_CASE("a shuffle that reads a returned lane fails the launch", "[cuemu]") {
  Dev<float> out(32);
  half_warp_shuffle_kernel<<<1, 32>>>(out.p);
  const std::string e = last_error();
  INFO(e);
  CHECK(e.find("reads lane 16, which has returned") != std::string::npos);
}

TEST_CASE("a divergent __syncthreads names both sites", "[cuemu]") {
  Dev<float> out(128);
  divergent_sync_kernel<<<1, 128>>>(out.p);
  const std::string e = last_error();
  INFO(e);
  CHECK(e.find("divergent __syncthreads") != std::string::npos);
  const size_t a = e.find("tests/test_cuemu_runtime.cu:"), b = e.rfind("tests/test_cuemu_runtime.cu:");
  REQUIRE(a != std::string::npos);
  CHECK(a != b);  // two different lines
}

TEST_CASE("launches past CUDA's limits are refused through CUDA_CHECK_LAUNCH", "[cuemu]") {
  Dev<float> out(32);
  auto check = [](const char* kernel) { CUDA_CHECK_LAUNCH(kernel, nullptr); };
  write_kernel<<<1, 2048>>>(out.p, 32);
  CHECK_THROWS_WITH(check("write_kernel"), Catch::Contains("kernel write_kernel failed: invalid configuration "
                                                           "argument") &&
                                               Catch::Contains("2048 threads"));
  write_kernel<<<dim3(1, 70000), 32>>>(out.p, 32);
  CHECK_THROWS_WITH(check("write_kernel"), Catch::Contains("invalid configuration argument") &&
                                               Catch::Contains("grid (1, 70000, 1)"));
  write_kernel<<<1, dim3(32, 1, 65)>>>(out.p, 32);
  CHECK_THROWS_WITH(check("write_kernel"), Catch::Contains("invalid configuration argument"));
  write_kernel<<<0x80000000u, 32>>>(out.p, 32);  // grid.x past 2^31 - 1
  CHECK_THROWS_WITH(check("write_kernel"), Catch::Contains("invalid configuration argument") &&
                                               Catch::Contains("grid (2147483648, 1, 1)"));
  write_kernel<<<0, 32>>>(out.p, 32);
  CHECK_THROWS_WITH(check("write_kernel"), Catch::Contains("zero dimension"));
  write_kernel<<<1, 1024>>>(out.p, 32);
  CHECK_NOTHROW(check("write_kernel"));
}

TEST_CASE("a kernel given a host pointer is refused, naming the argument", "[cuemu]") {
  std::vector<float> host(32);
  write_kernel<<<1, 32>>>(host.data(), 32);
  const std::string e = last_error();
  INFO(e);
  CHECK(e.find("argument 1") != std::string::npos);
  CHECK(e.find("not device memory") != std::string::npos);
}

TEST_CASE("a kernel writing past its allocation is caught", "[cuemu]") {
  float* p = nullptr;
  REQUIRE(cudaMalloc(&p, 100 * sizeof(float)) == cudaSuccess);
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer: the write itself is reported, at the kernel's line, and the
  // process ends (in a child, so this test goes on).
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    write_kernel<<<1, 32>>>(p, 101);
    _exit(0);
  }
  close(fds[1]);
  std::string err;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, size_t(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  INFO(err);
  CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
  CHECK(err.find("AddressSanitizer") != std::string::npos);
  CHECK(err.find("write_kernel") != std::string::npos);
  CHECK(err.find("tests/test_cuemu_runtime.cu:") != std::string::npos);
#else
  // Without ASan: the canary after the allocation, checked when the kernel ends.
  write_kernel<<<1, 32>>>(p, 101);
  const std::string e = last_error();
  INFO(e);
  CHECK(e.find("an illegal memory access was encountered") != std::string::npos);
  CHECK(e.find("write_kernel") != std::string::npos);
  CHECK(e.find("past the end of the 400-byte device allocation") != std::string::npos);
  // cudaFree reports it too (the canary is still wrong).
  CHECK(cudaFree(p) == cudaErrorIllegalAddress);
  (void)cudaGetLastError();
  p = nullptr;
#endif
  if (p != nullptr) CHECK(cudaFree(p) == cudaSuccess);
}

TEST_CASE("copies and memsets are checked against the allocations and their kind", "[cuemu]") {
  Dev<float> d(100);
  std::vector<float> h(200, 1.0f);
  CHECK(cudaMemcpy(d.p, h.data(), 100 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(d.p, h.data(), 101 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(std::string(cudaGetErrorString(cudaGetLastError())).find("not inside one device allocation") !=
        std::string::npos);
  CHECK(cudaMemcpy(h.data(), d.p, 100 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d.p, d.p + 50, 50 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemset(h.data(), 0, 4) == cudaErrorInvalidValue);
  CHECK(cudaMemset(d.p + 99, 0, 8) == cudaErrorInvalidValue);
  CHECK(cudaMemset(d.p + 99, 0, 4) == cudaSuccess);
  CHECK(cudaFree(h.data()) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("streams and events: checked handles, timestamps", "[cuemu]") {
  cudaStream_t s = nullptr;
  cudaEvent_t a = nullptr, b = nullptr, quiet = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreate(&a) == cudaSuccess);
  REQUIRE(cudaEventCreate(&b) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming) == cudaSuccess);
  CHECK(cudaEventRecord(a, s) == cudaSuccess);
  usleep(2000);
  CHECK(cudaEventRecord(b, s) == cudaSuccess);
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess);
  CHECK(ms >= 1.5f);
  CHECK(cudaEventRecord(quiet, s) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, a, quiet) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamWaitEvent(s, quiet, 0) == cudaSuccess);
  CHECK(cudaEventQuery(quiet) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  Dev<float> d(4);
  CHECK(cudaMemsetAsync(d.p, 0, 16, s) == cudaErrorInvalidResourceHandle);  // destroyed
  write_kernel<<<1, 32, 0, s>>>(d.p, 4);
  CHECK(last_error().find("not a live stream") != std::string::npos);
  CHECK(cudaEventDestroy(a) == cudaSuccess);
  CHECK(cudaEventDestroy(a) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventDestroy(b) == cudaSuccess);
  CHECK(cudaEventDestroy(quiet) == cudaSuccess);
  (void)cudaGetLastError();
}

TEST_CASE("IPC: another process writes into a device allocation through its handle", "[cuemu]") {
  Dev<float> d(1000);
  cudaIpcMemHandle_t h;
  REQUIRE(cudaIpcGetMemHandle(&h, d.p) == cudaSuccess);
  void* self = nullptr;
  CHECK(cudaIpcOpenMemHandle(&self, h, cudaIpcMemLazyEnablePeerAccess) == cudaErrorInvalidValue);  // same process
  (void)cudaGetLastError();
  const pid_t pid = fork();
  if (pid == 0) {
    void* peer = nullptr;
    if (cudaIpcOpenMemHandle(&peer, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) _exit(2);
    write_kernel<<<4, 64>>>(static_cast<float*>(peer), 1000);  // a kernel on the peer's memory
    if (cudaGetLastError() != cudaSuccess) _exit(3);
    if (cudaIpcCloseMemHandle(peer) != cudaSuccess) _exit(4);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  for (float f : d.host()) REQUIRE(f == 1.0f);
}
