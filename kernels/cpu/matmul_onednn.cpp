// kernels/cpu/matmul_onednn.cpp
//
// oneDNN's matmul primitive takes each operand as a memory descriptor with explicit
// strides, so a transposed operand is only a swapped stride pair. Creating a primitive
// costs far more than running one at these sizes, so primitives are cached by their full
// description (shape, strides, data type, bias, accumulate); a training step reuses the
// same dozen shapes every time. Accumulation is oneDNN's sum post-op: the product is
// added to dst's old value in fp32 and rounded once.
#include "kernels/cpu/matmul_onednn.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#ifdef RINGZERO_HAVE_ONEDNN
#include <cpuid.h>

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

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;

struct OneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };
  std::map<Key, Entry> cache;
};
OneDnn& onednn() {
  static OneDnn s;
  return s;
}

}  // namespace

bool onednn_bf16_matmul_available() {
  static const bool available = [] {
    const char* env = std::getenv("RINGZERO_BF16_MATMUL");
    if (env && std::strcmp(env, "fp32") == 0) return false;
    if (!cpu_has_bf16_units()) {
      std::fprintf(stderr,
                   "ringzero: this CPU has no AVX512_BF16 or AMX-BF16: bf16 matmuls run in fp32 (Eigen) on "
                   "widened copies\n");
      return false;
    }
    return true;
  }();
  return available;
}

bool onednn_matmul(void* dst, int64_t ldd, StridedOperand a, StridedOperand b, const void* bias, int64_t M,
                   int64_t K, int64_t N, bool accumulate, bool elem_bf16) {
  using dt = dnnl::memory::data_type;
  const dt e = elem_bf16 ? dt::bf16 : dt::f32;
  OneDnn& s = onednn();
  const Key key{M, K, N, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldd, bias != nullptr, accumulate,
                elem_bf16};
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.cache.find(key);
    if (it != s.cache.end()) {
      pd = it->second.pd;
      prim = it->second.prim;
    } else {
      dnnl::memory::desc a_md({M, K}, e, {a.row_stride, a.col_stride});
      dnnl::memory::desc b_md({K, N}, e, {b.row_stride, b.col_stride});
      dnnl::memory::desc c_md({M, N}, e, {ldd, 1});
      dnnl::memory::desc bias_md = bias ? dnnl::memory::desc({1, N}, e, {N, 1}) : dnnl::memory::desc();
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      try {
        pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, s.engine);
      } catch (const dnnl::error&) {
        return false;  // this oneDNN has no implementation for this case here
      }
      prim = dnnl::matmul(pd);
      s.cache.emplace(key, OneDnn::Entry{pd, prim});
    }
  }
  dnnl::memory a_m(pd.src_desc(), s.engine, const_cast<void*>(a.data));
  dnnl::memory b_m(pd.weights_desc(), s.engine, const_cast<void*>(b.data));
  dnnl::memory c_m(pd.dst_desc(), s.engine, dst);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a_m}, {DNNL_ARG_WEIGHTS, b_m}, {DNNL_ARG_DST, c_m}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(pd.bias_desc(), s.engine, const_cast<void*>(bias)));
  prim.execute(s.stream, args);
  s.stream.wait();
  return true;
}

#else  // built without oneDNN

bool onednn_bf16_matmul_available() {
  static const bool available = [] {
    std::fprintf(stderr, "ringzero: built without oneDNN (libdnnl-dev): bf16 matmuls run in fp32 (Eigen) on widened copies\n");
    return false;
  }();
  return available;
}

bool onednn_matmul(void*, int64_t, StridedOperand, StridedOperand, const void*, int64_t, int64_t, int64_t, bool,
                   bool) {
  return false;
}

#endif

}  // namespace rz
