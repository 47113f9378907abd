// kernels/cpu/gemm_f32.cpp
//
// The classic blocked GEMM (Goto / BLIS loop order), written for the model's shapes on
// one AVX2 core:
//   for jc over N in NC columns:                      b block (KC x NC) packed, shared
//     for pc over K in KC steps:
//       for ic over M in MC rows (threads split here): a block (MC x KC) packed, per thread
//         for jr over the block's 16-column panels:     b micro-panel (KC x 16) stays in L1
//           for ir over its 6-row panels:                a micro-panel (6 x KC) from L2
//             6x16 register tile: 12 ymm accumulators, kc fused multiply-adds each
// Each tile starts from dst (or the bias, or zero, on the first K block), runs its kc
// FMAs in k order and stores back, so an element's value is one FMA chain over k in
// order whatever the blocking (gemm_f32.h). A ragged last row panel (R < 6 rows) runs an
// R-row twin of the kernel in place (attention's 32- and 64-row products end in one); a
// ragged column edge runs on a padded 16-column copy. The kernel and the packing are compiled for AVX2 + FMA by a target
// attribute and chosen at run time, so builds without -march=native use them too.
#include "kernels/cpu/gemm_f32.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/memory.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RZ_GEMM_X86 1
#endif

namespace rz {

namespace {

constexpr int64_t kMR = 6, kNR = 16;
constexpr int64_t kKC = 256;   // a micro-panel 6 KB, b micro-panel 16 KB: L1 is 32 KB
constexpr int64_t kMC = 48;    // a block 48 KB (L2 is 512 KB); 96 measured slower at d12's N = 2304-3072
constexpr int64_t kNC = 3072;  // b block up to 3 MB: L3

// Per-thread packing space, grown on demand and kept (no allocation per step).
struct PackSpace {
  Buffer<float> a, b;
  float* get_a(size_t n) {
    if (a.size() < n) a.allocate(MemTag::workspace, n);
    return a.data();
  }
  float* get_b(size_t n) {
    if (b.size() < n) b.allocate(MemTag::workspace, n);
    return b.data();
  }
};
thread_local PackSpace t_pack;

inline float at(const GemmOperand& x, int64_t i, int64_t j) { return x.data[i * x.row_stride + j * x.col_stride]; }

// a block rows [i0, i0+mc), k [k0, k0+kc) into 6-row panels: panel p, step k holds
// rows p*6 .. p*6+5 at ap[p*6*kc + k*6 + r], zero past mc.
void pack_a(float* ap, const GemmOperand& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc) {
  for (int64_t p = 0; p < mc; p += kMR) {
    float* dst = ap + p * kc;
    const int64_t rows = std::min(kMR, mc - p);
    if (a.col_stride == 1) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = a.data + (i0 + p + r) * a.row_stride + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = src[k];
      }
      for (int64_t r = rows; r < kMR; ++r)
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = 0.0f;
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t r = 0; r < rows; ++r) dst[k * kMR + r] = at(a, i0 + p + r, k0 + k);
        for (int64_t r = rows; r < kMR; ++r) dst[k * kMR + r] = 0.0f;
      }
    }
  }
}

// b block k [k0, k0+kc), columns [j0, j0+nc) into 16-column panels: panel q, step k holds
// columns q*16 .. q*16+15 at bp[q*16*kc + k*16 + c], zero past nc. Packs panels [q0, q1).
// A row-major b is read row by row across all the panels (one sequential stream through
// memory: panel by panel, each k step was a new cache line at a stride of b's row, and the
// loads of that first touch were the packing's main cost); a transposed b column by column.
void pack_b_panels(float* bp, const GemmOperand& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t q0,
                   int64_t q1) {
  if (b.col_stride == 1) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = b.data + (k0 + k) * b.row_stride + j0;
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t cols = std::min(kNR, nc - q * kNR);
        const float* s = src + q * kNR;
        float* dst = bp + q * kNR * kc + k * kNR;
        if (cols == kNR) {
          std::memcpy(dst, s, kNR * sizeof(float));
        } else {
          for (int64_t c = 0; c < cols; ++c) dst[c] = s[c];
          for (int64_t c = cols; c < kNR; ++c) dst[c] = 0.0f;
        }
      }
    }
    return;
  }
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t cols = std::min(kNR, nc - q * kNR);
    float* panel = bp + q * kNR * kc;
    for (int64_t c = 0; c < cols; ++c) {
      const float* src = b.data + k0 * b.row_stride + (j0 + q * kNR + c) * b.col_stride;
      for (int64_t k = 0; k < kc; ++k) panel[k * kNR + c] = src[k * b.row_stride];
    }
    for (int64_t c = cols; c < kNR; ++c)
      for (int64_t k = 0; k < kc; ++k) panel[k * kNR + c] = 0.0f;
  }
}

#ifdef RZ_GEMM_X86
enum class Start { load, row, zero };

// c (6 x 16, leading dimension ldc) = start + a_panel * b_panel over kc steps.
// start: c's old values (load), the 16 values of row (row), or zero.
// a's element (r, k) at a[r * ars + k * acs]: a packed panel (ars 1, acs 6) or the
// operand itself (rows of a row-major a, or columns of a transposed one).
__attribute__((target("avx2,fma"))) void kernel_6x16(int64_t kc, const float* __restrict a, int64_t ars,
                                                     int64_t acs, const float* __restrict b, float* c, int64_t ldc,
                                                     Start start, const float* row) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (start == Start::load) {
    c00 = _mm256_loadu_ps(c + 0 * ldc), c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
    c10 = _mm256_loadu_ps(c + 1 * ldc), c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
    c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  } else {
    const __m256 r0 = start == Start::row ? _mm256_loadu_ps(row) : _mm256_setzero_ps();
    const __m256 r1 = start == Start::row ? _mm256_loadu_ps(row + 8) : _mm256_setzero_ps();
    c00 = c10 = c20 = c30 = c40 = c50 = r0;
    c01 = c11 = c21 = c31 = c41 = c51 = r1;
  }
  const float *a0 = a, *a1 = a + ars, *a2 = a + 2 * ars, *a3 = a + 3 * ars, *a4 = a + 4 * ars, *a5 = a + 5 * ars;
#pragma GCC unroll 4
  for (int64_t k = 0, off = 0; k < kc; ++k, off += acs) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x;
    x = _mm256_broadcast_ss(a0 + off), c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a1 + off), c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a2 + off), c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a3 + off), c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a4 + off), c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a5 + off), c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
    b += kNR;
  }
  _mm256_storeu_ps(c + 0 * ldc, c00), _mm256_storeu_ps(c + 0 * ldc + 8, c01);
  _mm256_storeu_ps(c + 1 * ldc, c10), _mm256_storeu_ps(c + 1 * ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

// The same tile for R < 6 rows (a ragged last row panel): reads only R rows of a, so a
// is read in place there too, and computes no padding rows. Same FMA chain per element.
template <int R>
__attribute__((target("avx2,fma"))) void kernel_rx16(int64_t kc, const float* __restrict a, int64_t ars,
                                                     int64_t acs, const float* __restrict b, float* c, int64_t ldc,
                                                     Start start, const float* row) {
  __m256 c0[R], c1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (start == Start::load) {
      c0[r] = _mm256_loadu_ps(c + r * ldc), c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
    } else {
      c0[r] = start == Start::row ? _mm256_loadu_ps(row) : _mm256_setzero_ps();
      c1[r] = start == Start::row ? _mm256_loadu_ps(row + 8) : _mm256_setzero_ps();
    }
  }
#pragma GCC unroll 4
  for (int64_t k = 0, off = 0; k < kc; ++k, off += acs) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * ars + off);
      c0[r] = _mm256_fmadd_ps(x, b0, c0[r]), c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
    }
    b += kNR;
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(c + r * ldc, c0[r]), _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
}

// rows (1..6) x 16 of c: the 6-row kernel or its R-row twin.
void kernel_rows(int64_t rows, int64_t kc, const float* a, int64_t ars, int64_t acs, const float* b, float* c,
                 int64_t ldc, Start start, const float* row) {
  switch (rows) {
    case 1: kernel_rx16<1>(kc, a, ars, acs, b, c, ldc, start, row); return;
    case 2: kernel_rx16<2>(kc, a, ars, acs, b, c, ldc, start, row); return;
    case 3: kernel_rx16<3>(kc, a, ars, acs, b, c, ldc, start, row); return;
    case 4: kernel_rx16<4>(kc, a, ars, acs, b, c, ldc, start, row); return;
    case 5: kernel_rx16<5>(kc, a, ars, acs, b, c, ldc, start, row); return;
    default: kernel_6x16(kc, a, ars, acs, b, c, ldc, start, row); return;
  }
}

// One tile of dst at (i, j), rows x cols of it valid (at most 6 x 16). a holds exactly
// `rows` rows (read in place, or a zero-padded packed panel); a ragged column edge runs
// on a padded 16-column copy of the tile.
void tile(float* dst, int64_t ldd, int64_t rows, int64_t cols, int64_t kc, const float* ap, int64_t ars,
          int64_t acs, const float* bp, bool first, bool accumulate, const float* bias_j) {
  Start start = Start::load;
  if (first && !accumulate) start = bias_j ? Start::row : Start::zero;
  if (cols == kNR) {
    kernel_rows(rows, kc, ap, ars, acs, bp, dst, ldd, start, bias_j);
    return;
  }
  alignas(32) float t[kMR * kNR];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kNR; ++c) {
      float v = 0.0f;
      if (c < cols) v = start == Start::load ? dst[r * ldd + c] : start == Start::row ? bias_j[c] : 0.0f;
      t[r * kNR + c] = v;
    }
  kernel_rows(rows, kc, ap, ars, acs, bp, t, kNR, Start::load, nullptr);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ldd + c] = t[r * kNR + c];
}

// a read in place: rows of a row-major a, or a transposed a whose k steps are near
// (dweight's dout^T at OC <= 512); past that each k step is a new page and packing wins
// (d12's dweight with OC = 2304-3072: 58 -> 81 GFLOP/s).
bool read_a_in_place(const GemmOperand& a) {
  return (a.col_stride == 1 && a.row_stride <= 8192) || (a.row_stride == 1 && a.col_stride <= 512);
}

// dst's row blocks [blk0, blk1) (kMC rows each) x columns [jc, jc+nc), k steps [pc, pc+kc),
// against a packed b: panel q (columns jc + 16q ..) at bp + q * panel_stride, its k steps
// 16 floats apart from the block's first. a is read in place where direct_a (no packing:
// at N = 128 packing a cost more than it saved), its ragged last panel too (the R-row
// kernel reads R rows); a far-strided a is packed into ap (zero-padded rows).
void multiply_block(float* dst, int64_t ldd, const GemmOperand& a, bool direct_a, float* ap, const float* bp,
                    int64_t panel_stride, int64_t pc, int64_t kc, int64_t jc, int64_t nc, int64_t blk0,
                    int64_t blk1, int64_t M, bool first, bool accumulate, const float* bias) {
  const int64_t panels = (nc + kNR - 1) / kNR;
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t ic = blk * kMC, mc = std::min(kMC, M - ic);
    const int64_t direct_rows = direct_a ? mc : 0;
    if (direct_rows < mc) pack_a(ap, a, ic + direct_rows, mc - direct_rows, pc, kc);
    for (int64_t q = 0; q < panels; ++q) {
      const int64_t j = jc + q * kNR, cols = std::min(kNR, nc - q * kNR);
      const float* bq = bp + q * panel_stride;
      const float* bias_j = bias ? bias + j : nullptr;
      for (int64_t p = 0; p < mc; p += kMR) {
        float* d = dst + (ic + p) * ldd + j;
        const int64_t rows = std::min(kMR, mc - p);
        if (p < direct_rows)
          tile(d, ldd, rows, cols, kc, a.data + (ic + p) * a.row_stride + pc * a.col_stride, a.row_stride,
               a.col_stride, bq, first, accumulate, bias_j);
        else
          tile(d, ldd, rows, cols, kc, ap + (p - direct_rows) * kc, 1, kMR, bq, first, accumulate, bias_j);
      }
    }
  }
}

// One row of dst (M = 1: sampling's one new position per step), without packing: b's
// 16-column panels would be packed for a single use, and for a transposed b (a linear
// layer's weight) that strided copy was three quarters of a sampled token's time. Each
// element is still one FMA chain in k order from its start value, so the result is
// bitwise what the blocked path gives. Eight columns at a time, NB blocks of them
// interleaved (independent FMA chains hide the FMA latency): a row-major b gives the
// eight columns of a k step as one load; a transposed b (column j's k steps contiguous)
// gives an 8 x 8 block per eight k steps, transposed in registers. Columns past the last
// full eight, and k steps past the last full eight of a transposed b, run scalar chains.
__attribute__((target("avx2,fma"))) inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// dst[j0 .. j0 + 8 NB) of the row product, from their start values (start: 8 NB floats).
template <int NB>
__attribute__((target("avx2,fma"))) void row_block(float* dst, const float* start, const GemmOperand& a,
                                                   const GemmOperand& b, int64_t K, int64_t j0) {
  __m256 acc[NB];
  for (int q = 0; q < NB; ++q) acc[q] = _mm256_loadu_ps(start + 8 * q);
  const float* av = a.data;  // a(0, k) at av[k * a.col_stride]
  int64_t k = 0;
  if (b.col_stride == 1) {
    for (; k < K; ++k) {
      const __m256 x = _mm256_broadcast_ss(av + k * a.col_stride);
      const float* bk = b.data + k * b.row_stride + j0;
      for (int q = 0; q < NB; ++q) acc[q] = _mm256_fmadd_ps(x, _mm256_loadu_ps(bk + 8 * q), acc[q]);
    }
  } else {  // b.row_stride == 1: column j's k steps are contiguous
    for (; k + 8 <= K; k += 8) {
      __m256 x[8];
      for (int s = 0; s < 8; ++s) x[s] = _mm256_broadcast_ss(av + (k + s) * a.col_stride);
      for (int q = 0; q < NB; ++q) {
        __m256 c[8];  // c[t] = b(k .. k+7, j0 + 8q + t), then transposed: c[s] = b(k + s, j0 + 8q ..)
        for (int t = 0; t < 8; ++t) c[t] = _mm256_loadu_ps(b.data + (j0 + 8 * q + t) * b.col_stride + k);
        transpose8(c);
        for (int s = 0; s < 8; ++s) acc[q] = _mm256_fmadd_ps(x[s], c[s], acc[q]);
      }
    }
  }
  for (int q = 0; q < NB; ++q) _mm256_storeu_ps(dst + 8 * q, acc[q]);
  if (k == K) return;
  for (int64_t j = j0; j < j0 + 8 * NB; ++j) {  // a transposed b's last K % 8 steps
    float v = dst[j - j0];
    for (int64_t kk = k; kk < K; ++kk) v = std::fma(av[kk * a.col_stride], at(b, kk, j), v);
    dst[j - j0] = v;
  }
}

// dst (1, N) = start + a (1, K) * b (K, N); b row-major (col_stride 1) or transposed
// (row_stride 1). Threads split the columns (each element's chain is the same on any
// thread), outside another parallel region and where the product is worth a fork.
__attribute__((target("avx2,fma"))) void gemm_row(float* dst, const GemmOperand& a, const GemmOperand& b,
                                                  const float* bias, int64_t K, int64_t N, bool accumulate) {
  constexpr int64_t kCols = 32;  // columns per task: 4 blocks of 8
  const int64_t tasks = (N + kCols - 1) / kCols;
  const bool parallel = N * K >= (int64_t(1) << 21) && !omp_in_parallel() && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t j0 = task * kCols, j1 = std::min(N, j0 + kCols);
    alignas(32) float start[kCols];
    for (int64_t j = j0; j < j1; ++j) start[j - j0] = accumulate ? dst[j] : bias ? bias[j] : 0.0f;
    int64_t j = j0;
    if (j1 - j0 == kCols) {
      row_block<4>(dst + j, start, a, b, K, j);
      j += kCols;
    }
    for (; j + 8 <= j1; j += 8) row_block<1>(dst + j, start + (j - j0), a, b, K, j);
    for (; j < j1; ++j) {  // the last N % 8 columns
      float v = start[j - j0];
      for (int64_t k = 0; k < K; ++k) v = std::fma(a.data[k * a.col_stride], at(b, k, j), v);
      dst[j] = v;
    }
  }
}
#endif

bool cpu_has_avx2_fma() {
#ifdef RZ_GEMM_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace

bool gemm_f32_available() {
  static const bool available = [] {
    const char* env = std::getenv("RINGZERO_FP32_GEMM");
    if (env && std::strcmp(env, "eigen") == 0) return false;
    return cpu_has_avx2_fma();
  }();
  return available;
}

void gemm_f32(float* dst, int64_t ldd, GemmOperand a, GemmOperand b, const float* bias, int64_t M, int64_t K,
              int64_t N, bool accumulate) {
#ifdef RZ_GEMM_X86
  if (M <= 0 || N <= 0) return;
  if (accumulate) bias = nullptr;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) dst[i * ldd + j] = bias ? bias[j] : 0.0f;
    return;
  }
  if (M == 1 && (b.col_stride == 1 || b.row_stride == 1)) {
    gemm_row(dst, a, b, bias, K, N, accumulate);
    return;
  }
  const int64_t ic_blocks = (M + kMC - 1) / kMC;
  // Threads only where the product is worth a fork, and not inside another parallel
  // region (attention's heads); they split a's row blocks, so the result does not depend
  // on how many there are. One thread runs without a parallel region (small products are
  // called thousands of times a step).
  int threads = M * N * K < (int64_t(1) << 21) || omp_in_parallel() ? 1 : omp_get_max_threads();
  threads = int(std::min<int64_t>(threads, ic_blocks));
  const int64_t nc_max = std::min(kNC, N), kc_max = std::min(kKC, K);
  const bool direct_a = read_a_in_place(a);
  float* bp = t_pack.get_b(size_t(kc_max) * size_t((nc_max + kNR - 1) / kNR * kNR));
  auto body = [&](int tid, int nth) {
    float* ap = t_pack.get_a(size_t(std::min(kMC, (M + kMR - 1) / kMR * kMR)) * size_t(kc_max));
    for (int64_t jc = 0; jc < N; jc += kNC) {
      const int64_t nc = std::min(kNC, N - jc);
      const int64_t panels = (nc + kNR - 1) / kNR;
      for (int64_t pc = 0; pc < K; pc += kKC) {
        const int64_t kc = std::min(kKC, K - pc);
        const bool first = pc == 0;
        pack_b_panels(bp, b, pc, kc, jc, nc, panels * tid / nth, panels * (tid + 1) / nth);
        if (nth > 1) {
#pragma omp barrier
        }
        multiply_block(dst, ldd, a, direct_a, ap, bp, kNR * kc, pc, kc, jc, nc, ic_blocks * tid / nth,
                       ic_blocks * (tid + 1) / nth, M, first, accumulate, bias);
        if (nth > 1) {  // the next K block's packing overwrites bp
#pragma omp barrier
        }
      }
    }
  };
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    body(omp_get_thread_num(), omp_get_num_threads());
  } else {
    body(0, 1);
  }
#else
  (void)dst, (void)ldd, (void)a, (void)b, (void)bias, (void)M, (void)K, (void)N, (void)accumulate;
  std::abort();  // callers check gemm_f32_available() first
#endif
}

int64_t gemm_f32_packed_floats(int64_t K, int64_t N) { return (N + kNR - 1) / kNR * kNR * K; }

PackedB gemm_f32_pack_b(float* space, GemmOperand b, int64_t K, int64_t N) {
  pack_b_panels(space, b, 0, K, 0, N, 0, (N + kNR - 1) / kNR);
  return {space, K, N};
}

void gemm_f32_packed(float* dst, int64_t ldd, GemmOperand a, const PackedB& b, int64_t M, int64_t K, int64_t N,
                     bool accumulate) {
#ifdef RZ_GEMM_X86
  if (M <= 0 || N <= 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(dst + i * ldd, dst + i * ldd + N, 0.0f);
    return;
  }
  const bool direct_a = read_a_in_place(a);
  float* ap = direct_a ? nullptr : t_pack.get_a(size_t(std::min(kMC, (M + kMR - 1) / kMR * kMR)) * size_t(kKC));
  const int64_t ic_blocks = (M + kMC - 1) / kMC;
  for (int64_t pc = 0; pc < K; pc += kKC)
    multiply_block(dst, ldd, a, direct_a, ap, b.data + pc * kNR, kNR * b.K, pc, std::min(kKC, K - pc), 0, N, 0,
                   ic_blocks, M, pc == 0, accumulate, nullptr);
#else
  (void)dst, (void)ldd, (void)a, (void)b, (void)M, (void)K, (void)N, (void)accumulate;
  std::abort();
#endif
}

}  // namespace rz
