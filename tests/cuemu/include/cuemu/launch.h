// tests/cuemu/include/cuemu/launch.h: a kernel launch for the CUDA-on-CPU emulator.
//
// The build copies each .cu file into the build tree with every `k<<<grid, block, shmem,
// stream>>>(args)` rewritten to `::cuemu::launch(k, "k", __FILE__, __LINE__, grid, block,
// shmem, stream)(args)` (rewrite_launches.cmake). The arguments are converted to the
// kernel's parameter types once, as CUDA copies them at the launch; the pointer arguments
// must point into device memory (or pinned host memory, which a GPU may address) or be
// null, else the launch is refused naming the argument; then every block runs, in order,
// before the call returns (runtime/scheduler.cpp). A refused or failed launch sets the
// thread's last error, which CUDA_CHECK_LAUNCH (base/cuda_check.h) reads as it would on a GPU.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuemu {

struct LaunchSite {
  const char* kernel;  // the kernel expression as written, e.g. "layernorm_forward_kernel<E>"
  const char* file;
  int line;
};

namespace detail {
struct PointerArg {
  int index;          // 1-based position in the kernel's parameter list
  const void* value;  // the pointer passed
};
// Checks the configuration and the pointer arguments, then runs every block; sets the
// thread's last error when the launch is refused or a block fails.
void run_grid(const LaunchSite& site, const void* kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
              void (*invoke)(const void* call), const void* call, const PointerArg* ptrs, size_t nptrs);

template <typename T>
constexpr bool is_data_pointer_v =
    std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>;
}  // namespace detail

template <typename... P>
class Launch {
 public:
  Launch(void (*kernel)(P...), LaunchSite site, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream)
      : kernel_(kernel), site_(site), grid_(grid), block_(block), shmem_(shmem), stream_(stream) {}

  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    using Args = std::tuple<std::decay_t<P>...>;
    struct Call {
      void (*kernel)(P...);
      Args args;
    };
    const Call call{kernel_, Args(std::forward<A>(args)...)};
    detail::PointerArg ptrs[sizeof...(P) + 1];
    size_t nptrs = 0;
    collect_pointers(call.args, ptrs, &nptrs, std::index_sequence_for<P...>{});
    detail::run_grid(
        site_, reinterpret_cast<const void*>(kernel_), grid_, block_, shmem_, stream_,
        [](const void* c) {
          const Call* k = static_cast<const Call*>(c);
          std::apply(k->kernel, k->args);
        },
        &call, ptrs, nptrs);
  }

 private:
  template <typename Args, size_t... I>
  static void collect_pointers(const Args& args, detail::PointerArg* out, size_t* n, std::index_sequence<I...>) {
    (
        [&] {
          using T = std::tuple_element_t<I, Args>;
          if constexpr (detail::is_data_pointer_v<T>) out[(*n)++] = {int(I) + 1, std::get<I>(args)};
        }(),
        ...);
  }

  void (*kernel_)(P...);
  LaunchSite site_;
  dim3 grid_, block_;
  size_t shmem_;
  cudaStream_t stream_;
};

template <typename... P>
Launch<P...> launch(void (*kernel)(P...), const char* name, const char* file, int line, dim3 grid, dim3 block,
                    size_t shmem = 0, cudaStream_t stream = 0) {
  return Launch<P...>(kernel, LaunchSite{name, file, line}, grid, block, shmem, stream);
}

}  // namespace cuemu
