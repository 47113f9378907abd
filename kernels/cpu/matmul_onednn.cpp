// kernels/cpu/matmul_onednn.cpp
//
// oneDNN's matmul primitive takes each operand as a memory descriptor with explicit
// strides, so a transposed operand is only a swapped stride pair. Creating a primitive
// costs far more than running one at these sizes, so primitives are cached by their full
// description (shape, strides, data type, bias, accumulate, thread count); a training step
// reuses the same dozen shapes every time. Accumulation is oneDNN's sum post-op: the
// product is added to dst's old value in fp32 and rounded once.
//
// Concurrent callers (thread ranks in one process: tests/zero_harness.h) share nothing of
// oneDNN's: the engine, the stream, the primitive cache and the scratchpad all belong to
// the calling thread (thread_local). This is what oneDNN documents as safe:
//   - a primitive must not run on two threads at once, and with the default
//     library-managed scratchpad it must run on the thread that created it (its
//     scratchpad is that thread's, shared by every primitive the thread made, unless
//     oneDNN was built with DNNL_ENABLE_CONCURRENT_EXEC, which Debian's is not);
//   - with a user-managed scratchpad (scratchpad_mode::user) execution is thread-safe as
//     long as no two executions use one scratchpad buffer at the same time.
// Every primitive here is created, and only ever executed, by one thread, with that
// thread's own scratchpad buffer: no execution can overlap another on any oneDNN state.
// The thread count (omp_get_max_threads at the call) is part of the key, so a product
// with the same operands on the same thread count runs the same primitive, partitioned
// the same way: the same bits (where oneDNN offers set_deterministic, it is set too).
#include "kernels/cpu/matmul_onednn.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#ifdef RINGZERO_HAVE_ONEDNN
#include <cpuid.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace rz {

#ifdef RINGZERO_HAVE_ONEDNN
namespace {

// CPUID: leaf 7 subleaf 1 EAX bit 5 is AVX512_BF16; leaf 7 subleaf 0 EDX bit 22 is AMX-BF16.
bool cpu_has_bf16_units() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx512_bf16 = (a >> 5) & 1;
  __cpuid_count(7, 0, a, b, c, d);
  const bool amx_bf16 = (d >> 22) & 1;
  return avx512_bf16 || amx_bf16;
}

// M, K, N, a's strides, b's strides, ldd, threads, bias, accumulate, bf16.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, bool, bool>;

// One calling thread's oneDNN: nothing in it is touched by another thread.
struct ThreadOneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };
  std::map<Key, Entry> cache;
  // The user-managed scratchpad, grown to the largest need of this thread's primitives.
  struct FreeAligned {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, FreeAligned> scratch;
  size_t scratch_bytes = 0;

  void* scratchpad(size_t bytes) {
    if (bytes > scratch_bytes) {
      const size_t rounded = (bytes + 4095) / 4096 * 4096;  // aligned_alloc wants a multiple
      scratch.reset(std::aligned_alloc(4096, rounded));
      if (!scratch) {
        scratch_bytes = 0;
        return nullptr;
      }
      scratch_bytes = rounded;
    }
    return scratch.get();
  }
};
ThreadOneDnn& thread_onednn() {
  thread_local ThreadOneDnn s;
  return s;
}

// The matmul primitive descriptor, in oneDNN 2's (operation descriptor) or 3's form.
dnnl::matmul::primitive_desc make_matmul_pd(const dnnl::engine& engine, const dnnl::memory::desc& a,
                                            const dnnl::memory::desc& b, const dnnl::memory::desc* bias,
                                            const dnnl::memory::desc& c, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  if (bias) return dnnl::matmul::primitive_desc(engine, a, b, *bias, c, attr);
  return dnnl::matmul::primitive_desc(engine, a, b, c, attr);
#else
  const dnnl::memory::desc none;
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, bias ? *bias : none, c), attr, engine);
#endif
}

// primitive_attr::set_deterministic(true) where this oneDNN has it (newer 3.x), else
// nothing: oneDNN's CPU matmuls are run-to-run deterministic for a fixed thread count.
template <typename Attr>
auto request_deterministic(Attr& attr, int) -> decltype(attr.set_deterministic(true), void()) {
  attr.set_deterministic(true);
}
template <typename Attr>
void request_deterministic(Attr&, long) {}

}  // namespace

bool onednn_bf16_matmul_available() {
  static const bool available = [] {
    const char* env = std::getenv("RINGZERO_BF16_MATMUL");
    if (env && std::strcmp(env, "fp32") == 0) return false;
    return cpu_has_bf16_units();
  }();
  return available;
}

void note_bf16_matmul_fallback() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("RINGZERO_BF16_MATMUL");
    if (env && std::strcmp(env, "fp32") == 0) return;  // asked for: no news
    if (!cpu_has_bf16_units())
      std::fprintf(stderr,
                   "ringzero: this CPU has no AVX512_BF16 or AMX-BF16: bf16 matmuls run in fp32 on "
                   "widened copies\n");
  });
}

std::string onednn_bf16_matmul_status() {
  const dnnl_version_t* v = dnnl_version();
  const std::string lib = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                          std::to_string(v->patch);
  const char* env = std::getenv("RINGZERO_BF16_MATMUL");
  if (env && std::strcmp(env, "fp32") == 0) return "off: RINGZERO_BF16_MATMUL=fp32 (" + lib + " built in)";
  if (!cpu_has_bf16_units()) return "off: this CPU has no AVX512_BF16 or AMX-BF16 (" + lib + " built in)";
  return "on: " + lib;
}

bool onednn_matmul(void* dst, int64_t ldd, StridedOperand a, StridedOperand b, const void* bias, int64_t M,
                   int64_t K, int64_t N, bool accumulate, bool elem_bf16) {
  using dt = dnnl::memory::data_type;
  const dt e = elem_bf16 ? dt::bf16 : dt::f32;
  ThreadOneDnn& s = thread_onednn();
  const Key key{M,   K, N, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldd, omp_get_max_threads(),
                bias != nullptr, accumulate, elem_bf16};
  auto it = s.cache.find(key);
  if (it == s.cache.end()) {
    const dnnl::memory::desc a_md({M, K}, e, {a.row_stride, a.col_stride});
    const dnnl::memory::desc b_md({K, N}, e, {b.row_stride, b.col_stride});
    const dnnl::memory::desc c_md({M, N}, e, {ldd, 1});
    const dnnl::memory::desc bias_md({1, N}, e, {N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    request_deterministic(attr, 0);
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    try {
      auto pd = make_matmul_pd(s.engine, a_md, b_md, bias ? &bias_md : nullptr, c_md, attr);
      it = s.cache.emplace(key, ThreadOneDnn::Entry{pd, dnnl::matmul(pd)}).first;
    } catch (const dnnl::error&) {
      return false;  // this oneDNN has no implementation for this case here
    }
  }
  const ThreadOneDnn::Entry& entry = it->second;
  const dnnl::memory::desc scratch_md = entry.pd.scratchpad_desc();
  void* scratch = s.scratchpad(scratch_md.get_size());
  if (!scratch && scratch_md.get_size() > 0) return false;  // no memory: the caller's fallback runs
  dnnl::memory a_m(entry.pd.src_desc(), s.engine, const_cast<void*>(a.data));
  dnnl::memory b_m(entry.pd.weights_desc(), s.engine, const_cast<void*>(b.data));
  dnnl::memory c_m(entry.pd.dst_desc(), s.engine, dst);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a_m},
                                             {DNNL_ARG_WEIGHTS, b_m},
                                             {DNNL_ARG_DST, c_m},
                                             {DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_md, s.engine, scratch)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(entry.pd.bias_desc(), s.engine, const_cast<void*>(bias)));
  entry.prim.execute(s.stream, args);
  s.stream.wait();
  return true;
}

#else  // built without oneDNN

bool onednn_bf16_matmul_available() { return false; }

void note_bf16_matmul_fallback() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr, "ringzero: built without oneDNN (libdnnl-dev): bf16 matmuls run in fp32 on widened copies\n");
  });
}

std::string onednn_bf16_matmul_status() { return "off: built without oneDNN (libdnnl-dev)"; }

bool onednn_matmul(void*, int64_t, StridedOperand, StridedOperand, const void*, int64_t, int64_t, int64_t, bool,
                   bool) {
  return false;
}

#endif

}  // namespace rz
