// kernels/cuda/matmul.cu: the linear layers through cuBLASLt (twin of kernels/cpu/matmul.cpp).
//
// Row-major meets column-major: a row-major (R, K) matrix with row stride ld is, to
// cuBLAS, the column-major (K, R) matrix with leading dimension ld -- its transpose. Every
// call site below writes the product it wants in row-major terms and the column-major
// product that computes it.
//
// Precision: fp32 operands use CUBLAS_COMPUTE_32F (true fp32; no TF32, so verify stays
// tight); bf16 operands are multiplied with fp32 accumulation and rounded once into the
// output. Accumulating products (beta = 1) add the old output in fp32 and round once, as
// the CPU's bf16_add_f32 does. The bias is broadcast into the output by a kernel before a
// beta = 1 product, rather than a cuBLASLt epilogue, because an epilogue's bias pointer
// must be 16-byte aligned and the model's biases are views into one parameter buffer.
// The bias gradient is a deterministic two-stage column sum (layernorm.cu), not atomics.
#include <array>
#include <map>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

template <typename E>
constexpr cudaDataType_t data_type() {
  return std::is_same_v<E, float> ? CUDA_R_32F : CUDA_R_16BF;
}

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// The largest power of two (<= 256) dividing the pointer and every stride in bytes: the
// alignment cuBLASLt may assume for an operand (it assumes 256 unless told).
uint32_t alignment_of(const void* p, long long ld, long long stride, int batch, cudaDataType_t t) {
  uint64_t bits = reinterpret_cast<uint64_t>(p) | uint64_t(ld) * type_bytes(t) | 256u;
  if (batch > 1) bits |= uint64_t(stride) * type_bytes(t);
  return uint32_t(bits & (~bits + 1));
}

struct Layout {
  cublasLtMatrixLayout_t desc = nullptr;
  Layout(cudaDataType_t t, int rows, int cols, long long ld, int batch, long long stride) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc, t, uint64_t(rows), uint64_t(cols), int64_t(ld)));
    if (batch > 1) {
      int32_t count = batch;
      int64_t offset = stride;
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                    sizeof(offset)));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(desc); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// out (N, OC) = bias (OC) broadcast over rows
template <typename E>
__global__ void broadcast_rows_kernel(E* out, const E* bias, int OC, size_t n) {
  RZ_GRID_STRIDE(i, n) out[i] = bias[i % OC];
}

}  // namespace

struct GemmAlgoCache {
  using Key = std::array<long long, 17>;
  std::mutex mu;
  std::map<Key, cublasLtMatmulAlgo_t> algos;
};
GemmAlgoCache* new_gemm_algo_cache() { return new GemmAlgoCache; }
void delete_gemm_algo_cache(GemmAlgoCache* cache) { delete cache; }

void gemm(const BlasLt& lt, cudaStream_t s, bool transA, bool transB, int m, int n, int k, const void* A,
          long long lda, long long strideA, const void* B, long long ldb, long long strideB, cudaDataType_t ab,
          void* D, long long ldd, long long strideD, cudaDataType_t d, int batch, float alpha, float beta) {
  if (m == 0 || n == 0 || batch == 0 || (k == 0 && beta == 1.0f)) return;  // nothing to add
  RZ_CHECK(k > 0, "gemm: an empty inner dimension (k = 0) with beta = %g", double(beta));
  cublasLtMatmulDesc_t op = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    const cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // Stored shapes: op(A) is (m, k), op(B) is (k, n), D is (m, n).
    Layout a(ab, transA ? k : m, transA ? m : k, lda, batch, strideA);
    Layout b(ab, transB ? n : k, transB ? k : n, ldb, batch, strideB);
    Layout dl(d, m, n, ldd, batch, strideD);
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = lt.workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t align_a = alignment_of(A, lda, strideA, batch, ab), align_b = alignment_of(B, ldb, strideB, batch, ab),
                   align_d = alignment_of(D, ldd, strideD, batch, d);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                      sizeof(align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                      sizeof(align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                      sizeof(align_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                      sizeof(align_d)));
    const GemmAlgoCache::Key key = {transA, transB, m, n, k, lda, ldb, ldd, batch > 1 ? strideA : 0,
                                    batch > 1 ? strideB : 0, batch > 1 ? strideD : 0, batch, (long long)ab,
                                    (long long)d, align_a, align_b, align_d};
    cublasLtMatmulAlgo_t algo{};
    bool cached = false;
    if (lt.algos) {
      std::lock_guard<std::mutex> lock(lt.algos->mu);
      auto it = lt.algos->algos.find(key);
      if (it != lt.algos->algos.end()) {
        algo = it->second;
        cached = true;
      }
    }
    if (!cached) {
      cublasLtMatmulHeuristicResult_t best{};
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, op, a.desc, b.desc, dl.desc, dl.desc, pref, 1, &best, &found));
      RZ_CHECK(found > 0, "cuBLASLt has no algorithm for a %s gemm m=%d n=%d k=%d batch=%d (transA=%d transB=%d)",
               ab == CUDA_R_32F ? "fp32" : "bf16", m, n, k, batch, int(transA), int(transB));
      algo = best.algo;
      if (lt.algos) {
        std::lock_guard<std::mutex> lock(lt.algos->mu);
        lt.algos->algos.emplace(key, algo);
      }
    }
    // C is D: beta = 1 accumulates into the output in place.
    CUBLAS_CHECK(cublasLtMatmul(lt.handle, op, &alpha, A, a.desc, B, b.desc, &beta, D, dl.desc, D, dl.desc, &algo,
                                lt.workspace, lt.workspace_bytes, s));
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(op);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(op);
}

template <typename E>
void matmul_forward(const BlasLt& lt, E* out, const E* inp, const E* weight, const E* bias, int N, int C, int OC,
                    cudaStream_t s) {
  const size_t n = size_t(N) * OC;
  if (n == 0) return;
  if (bias) {
    broadcast_rows_kernel<E><<<grid_for(n), kThreads, 0, s>>>(out, bias, OC, n);
    CUDA_CHECK_LAUNCH("broadcast_rows_kernel(bias)", s);
  }
  // Row-major out (N, OC) = inp (N, C) @ weight^T. Column-major: out^T (OC, N) =
  // weight (OC, C) * inp^T (C, N): A = weight seen as (C, OC) ld C, transposed to (OC, C);
  // B = inp seen as (C, N) ld C, as is; D (m=OC, n=N) ld OC.
  gemm(lt, s, true, false, OC, N, C, weight, C, 0, inp, C, 0, data_type<E>(), out, OC, 0, data_type<E>(), 1, 1.0f,
       bias ? 1.0f : 0.0f);
}

template <typename E>
void matmul_backward(const BlasLt& lt, E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, int N,
                     int C, int OC, cudaStream_t s) {
  if (dinp) {
    // Row-major dinp (N, C) += dout (N, OC) @ weight (OC, C). Column-major: dinp^T (C, N) +=
    // weight^T (C, OC) * dout^T (OC, N): A = weight seen as (C, OC) ld C, as is; B = dout seen
    // as (OC, N) ld OC, as is; D (m=C, n=N) ld C.
    gemm(lt, s, false, false, C, N, OC, weight, C, 0, dout, OC, 0, data_type<E>(), dinp, C, 0, data_type<E>(), 1, 1.0f,
         1.0f);
  }
  // Row-major dweight (OC, C) += dout^T (OC, N) @ inp (N, C). Column-major: dweight^T (C, OC)
  // += inp^T (C, N) * dout (N, OC): A = inp seen as (C, N) ld C, as is; B = dout seen as
  // (OC, N) ld OC, transposed to (N, OC); D (m=C, n=OC) ld C.
  gemm(lt, s, false, true, C, OC, N, inp, C, 0, dout, OC, 0, data_type<E>(), dweight, C, 0, data_type<E>(), 1, 1.0f,
       1.0f);
}

#define RZ_INSTANTIATE(E)                                                                                      \
  template void matmul_forward<E>(const BlasLt&, E*, const E*, const E*, const E*, int, int, int, cudaStream_t); \
  template void matmul_backward<E>(const BlasLt&, E*, E*, const E*, const E*, const E*, int, int, int, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
