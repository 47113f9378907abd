// kernels/cpu/adamw.cpp
//
// Why it is built this way: AdamW touches every parameter once per step and does little
// arithmetic per byte (fp32: read w, m, v, g and write w, m, v = 28 bytes per parameter),
// so it should run at memory speed. A plain loop does not: the compiler keeps it scalar
// (sqrt may set errno), and the two divisions and the square root then cost about 15
// cycles per parameter. Here the body is written once as an "element step" over a lane
// type: 8 floats in AVX2 registers when the build targets AVX2 + FMA (-march=native on
// such a CPU), or one float otherwise. Both lane types do exactly the same IEEE operations
// in the same order (products, fused multiply-adds, divisions, square root, all correctly
// rounded), so an element's result does not depend on whether it fell into a vector or
// into the scalar remainder: the update is bitwise the same for any thread count, any
// range split (ZeRO shards) and any alignment.
#include "kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu/convert.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define RZ_ADAMW_AVX2 1
#endif

namespace rz {

namespace {

// The per-step constants, already in the form the element step uses.
struct AdamWConsts {
  float grad_scale, beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias1, bias2;  // 1 - beta^t
  float eps, lr, weight_decay;
};

// One lane of the update: g is the raw gradient, w the weight before; returns the new
// weight and updates m, v in place. Operation order (the same for every lane type):
//   g' = g * grad_scale
//   m  = fma(beta1, m, (1 - beta1) * g')
//   v  = fma(beta2, v, ((1 - beta2) * g') * g')
//   u  = fma(weight_decay, w, (m / bias1) / (sqrt(v / bias2) + eps))
//   w  = w - lr * u                       (one fused negative multiply-add)
// Without FMA in the build (no vector lanes either) a separate multiply and add stand in
// for the fused one: every element then takes this path, so it is still the same for all.
inline float madd(float a, float b, float c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

inline float step_lane(float g, float w, float& m, float& v, const AdamWConsts& k) {
  const float gs = g * k.grad_scale;
  const float mi = madd(k.beta1, m, k.one_minus_beta1 * gs);
  const float vi = madd(k.beta2, v, (k.one_minus_beta2 * gs) * gs);
  m = mi;
  v = vi;
  const float u = madd(k.weight_decay, w, (mi / k.bias1) / (std::sqrt(vi / k.bias2) + k.eps));
  return madd(-k.lr, u, w);
}

#ifdef RZ_ADAMW_AVX2
constexpr size_t kLanes = 8;

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) {  // bf16 -> fp32 is exact: the bits move up 16 places
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void store8(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
// fp32 -> bf16, round to nearest even, NaN kept quiet: float_to_bf16 (base/bf16.h) on 8 lanes.
inline void store8(bf16* p, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));  // mag < 2^31: signed compare is fine
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, quiet, nan);
  // pack the low 16 bits of the 8 lanes (values < 2^16, so unsigned saturation keeps them)
  const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(lo, hi));
}

inline __m256 step_lanes(__m256 g, __m256 w, __m256& m, __m256& v, const AdamWConsts& k) {
  const __m256 gs = _mm256_mul_ps(g, _mm256_set1_ps(k.grad_scale));
  const __m256 mi = _mm256_fmadd_ps(_mm256_set1_ps(k.beta1), m, _mm256_mul_ps(_mm256_set1_ps(k.one_minus_beta1), gs));
  const __m256 vi =
      _mm256_fmadd_ps(_mm256_set1_ps(k.beta2), v, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(k.one_minus_beta2), gs), gs));
  m = mi;
  v = vi;
  const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, _mm256_set1_ps(k.bias2))), _mm256_set1_ps(k.eps));
  const __m256 adam = _mm256_div_ps(_mm256_div_ps(mi, _mm256_set1_ps(k.bias1)), denom);
  const __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(k.weight_decay), w, adam);
  return _mm256_fnmadd_ps(_mm256_set1_ps(k.lr), u, w);  // w - lr * u
}
#endif

// Elements [begin, end): vectors of kLanes first, then the remainder one by one.
// read_w(i) -> the weight (float); write_w(i, w) stores it; the _8 forms do 8 lanes.
template <typename G, typename ReadW, typename WriteW, typename ReadW8, typename WriteW8>
void update_range(float* m, float* v, const G* grads, size_t begin, size_t end, const AdamWConsts& k,
                  ReadW read_w, WriteW write_w, [[maybe_unused]] ReadW8 read_w8,
                  [[maybe_unused]] WriteW8 write_w8) {
  size_t i = begin;
#ifdef RZ_ADAMW_AVX2
  for (; i + kLanes <= end; i += kLanes) {
    __m256 mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    const __m256 w = step_lanes(load8(grads + i), read_w8(i), mi, vi, k);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    write_w8(i, w);
  }
#endif
  for (; i < end; ++i) write_w(i, step_lane(load(grads[i]), read_w(i), m[i], v[i], k));
}

// One contiguous range at one weight decay (s.spans ignored).
template <typename P, typename G>
void update_contiguous(P* params, float* master, float* m, float* v, const G* grads, size_t n,
                       const AdamWStep& s) {
  const AdamWConsts k{s.grad_scale,
                      s.beta1,
                      1.0f - s.beta1,
                      s.beta2,
                      1.0f - s.beta2,
                      1.0f - std::pow(s.beta1, float(s.t)),
                      1.0f - std::pow(s.beta2, float(s.t)),
                      s.eps,
                      s.lr,
                      s.weight_decay};
  // Blocks of whole vectors, so that the scalar remainder is only at the very end; the
  // result does not depend on the split anyway (see the top of the file).
  constexpr size_t kBlock = 1 << 14;
  const int64_t nblocks = int64_t((n + kBlock - 1) / kBlock);
  auto run = [&](auto read_w, auto write_w, auto read_w8, auto write_w8) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t b = 0; b < nblocks; ++b) {
      const size_t begin = size_t(b) * kBlock, end = std::min(n, begin + kBlock);
      update_range(m, v, grads, begin, end, k, read_w, write_w, read_w8, write_w8);
    }
  };
#ifdef RZ_ADAMW_AVX2
  auto master8 = [&](size_t i) { return _mm256_loadu_ps(master + i); };
#else
  auto master8 = [](size_t) { return 0.0f; };  // never called: no vector lanes
#endif
  auto from_master = [&](size_t i) { return master[i]; };
  if (master == nullptr) {
    if constexpr (std::is_same_v<P, float>) {
#ifdef RZ_ADAMW_AVX2
      run([&](size_t i) { return params[i]; }, [&](size_t i, float w) { params[i] = w; },
          [&](size_t i) { return _mm256_loadu_ps(params + i); }, [&](size_t i, __m256 w) { _mm256_storeu_ps(params + i, w); });
#else
      run([&](size_t i) { return params[i]; }, [&](size_t i, float w) { params[i] = w; }, master8,
          [](size_t, float) {});
#endif
    }
  } else if (params == nullptr) {
#ifdef RZ_ADAMW_AVX2
    run(from_master, [&](size_t i, float w) { master[i] = w; }, master8,
        [&](size_t i, __m256 w) { _mm256_storeu_ps(master + i, w); });
#else
    run(from_master, [&](size_t i, float w) { master[i] = w; }, master8, [](size_t, float) {});
#endif
  } else {
    auto write_both = [&](size_t i, float w) {
      master[i] = w;
      params[i] = store<P>(w);
    };
#ifdef RZ_ADAMW_AVX2
    run(from_master, write_both, master8, [&](size_t i, __m256 w) {
      _mm256_storeu_ps(master + i, w);
      store8(params + i, w);
    });
#else
    run(from_master, write_both, master8, [](size_t, float) {});
#endif
  }
}

}  // namespace

template <typename P, typename G>
void adamw_update(P* params, float* master, float* m, float* v, const G* grads, size_t n,
                  const AdamWStep& s) {
  if constexpr (!std::is_same_v<P, float>)
    RZ_CHECK(master != nullptr, "adamw_update: bf16 parameters need fp32 master weights");
  else
    RZ_CHECK(master != nullptr || params != nullptr, "adamw_update: no weights to update");
  RZ_CHECK(s.t >= 1, "adamw_update: step t must be >= 1, found %llu", (unsigned long long)s.t);
  check_adamw_spans(s, n);
  if (s.num_spans == 0) return update_contiguous(params, master, m, v, grads, n, s);
  // Element by element the same update as one call per span: the CPU gains nothing from
  // fusing them, so it runs them one after another.
  size_t begin = 0;
  for (size_t k = 0; k < s.num_spans; ++k) {
    AdamWStep one = s;
    one.weight_decay = s.spans[k].decay ? s.weight_decay : 0.0f;
    const size_t len = s.spans[k].end - begin;
    update_contiguous(params ? params + begin : nullptr, master ? master + begin : nullptr, m + begin, v + begin,
                      grads + begin, len, one);
    begin = s.spans[k].end;
  }
}

template void adamw_update<float, float>(float*, float*, float*, float*, const float*, size_t, const AdamWStep&);
template void adamw_update<float, bf16>(float*, float*, float*, float*, const bf16*, size_t, const AdamWStep&);
template void adamw_update<bf16, float>(bf16*, float*, float*, float*, const float*, size_t, const AdamWStep&);
template void adamw_update<bf16, bf16>(bf16*, float*, float*, float*, const bf16*, size_t, const AdamWStep&);

}  // namespace rz
