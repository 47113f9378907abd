// tests/cuemu/include/cuemu/device.h: CUDA's device language as plain C++ for the
// CUDA-on-CPU emulator (tests/cuemu/README.md). Included by the stand-in cuda_runtime.h.
//
// A kernel is an ordinary function, run once per CUDA thread on a user-level fiber
// (runtime/scheduler.cpp). threadIdx, blockIdx, blockDim and gridDim read the running
// thread's and block's coordinates. __syncthreads is a barrier of the block; the warp
// intrinsics (__shfl_*_sync, __syncwarp) are barriers of the named lanes of one warp of 32,
// with PTX's lane, width and clamp arithmetic. Each barrier records the file:line it is
// called from (the default arguments below), so a deadlock names where threads wait.
// __shared__ declarations are rewritten at build time (rewrite_launches.cmake) into
// per-OS-thread storage that the scheduler poisons at each block's start.
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace cuemu {

// Where a kernel's thread is: its coordinates, and its block's (scheduler.cpp keeps them
// current across fiber switches).
struct ThreadCoords {
  uint3 thread_idx;
};
struct BlockCoords {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

namespace detail {
// __thread, not thread_local: a plain pointer with no dynamic initialisation, so a kernel's
// every threadIdx is one TLS load, not a call to a C++ thread_local's wrapper function.
extern __thread ThreadCoords* t_thread;
extern __thread BlockCoords* t_block;

enum class WarpOp : uint8_t { shfl_idx, shfl_up, shfl_down, shfl_xor, syncwarp, ballot, vote_any, vote_all };
void syncthreads(const char* file, int line);
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int b, int width, const char* file, int line);
// A rewritten `__shared__` declaration reached by a thread (once per block it poisons the
// variable and counts its bytes against the block's shared memory).
void shared_var(void* p, size_t bytes, const char* file, int line);
void* dynamic_shared();
}  // namespace detail

// `extern __shared__ T name[]`, rewritten: the block's dynamic shared memory as a T array.
template <typename T>
struct DynamicShared {
  operator T*() const { return static_cast<T*>(detail::dynamic_shared()); }
  T& operator[](size_t i) const { return static_cast<T*>(detail::dynamic_shared())[i]; }
};

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move values of at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}
template <typename T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

}  // namespace cuemu

#define threadIdx (::cuemu::detail::t_thread->thread_idx)
#define blockIdx (::cuemu::detail::t_block->block_idx)
#define blockDim (::cuemu::detail::t_block->block_dim)
#define gridDim (::cuemu::detail::t_block->grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cuemu::detail::syncthreads(file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  (void)::cuemu::detail::warp_op(::cuemu::detail::WarpOp::syncwarp, mask, 0, 0, warpSize, file, line);
}
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  return ::cuemu::from_bits<T>(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::shfl_idx, mask,
                                                        ::cuemu::to_bits(var), src_lane, width, file, line));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  return ::cuemu::from_bits<T>(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::shfl_up, mask,
                                                        ::cuemu::to_bits(var), int(delta), width, file, line));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  return ::cuemu::from_bits<T>(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::shfl_down, mask,
                                                        ::cuemu::to_bits(var), int(delta), width, file, line));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  return ::cuemu::from_bits<T>(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::shfl_xor, mask,
                                                        ::cuemu::to_bits(var), lane_mask, width, file, line));
}

// Warp votes: barriers of the named lanes like the shuffles; the bits (or the answer) over
// the lanes of the mask that have not returned.
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return unsigned(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::ballot, mask, predicate != 0, 0, warpSize, file,
                                           line));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return int(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::vote_any, mask, predicate != 0, 0, warpSize, file,
                                      line));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return int(::cuemu::detail::warp_op(::cuemu::detail::WarpOp::vote_all, mask, predicate != 0, 0, warpSize, file,
                                      line));
}

// Atomics, as the host's atomic operations: kernels on different OS threads (a comm
// thread's stream) may run at the same time; within a block threads run one at a time, so
// atomics never race there, and contention and ordering are not exercised.
template <typename T>
T atomicAdd(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    T old, sum;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
      sum = old + v;
    } while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
  } else {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  }
}
template <typename T>
T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
template <typename T>
T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T>
T atomicMin(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T>
T __ldg(const T* p) { return *p; }

// --- bit casts and math the kernels use (CUDA's device functions; the host's libm gives
// results within a few ulps of the GPU's, never bit for bit).
inline unsigned int __float_as_uint(float f) { return ::cuemu::from_bits<unsigned int>(::cuemu::to_bits(f)); }
inline float __uint_as_float(unsigned int u) { return ::cuemu::from_bits<float>(::cuemu::to_bits(u)); }
inline int __float_as_int(float f) { return ::cuemu::from_bits<int>(::cuemu::to_bits(f)); }
inline float __int_as_float(int i) { return ::cuemu::from_bits<float>(::cuemu::to_bits(i)); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// The fast-math intrinsics, as the accurate functions (a GPU's are a few ulps looser).
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
// CUDA's integer and floating min/max overloads in the global namespace.
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
