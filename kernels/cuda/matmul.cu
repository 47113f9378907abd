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
//
// Alignment: the algorithm is chosen for the alignment the shape plans for
// (kernels/gemm_alignment.h), never for the pointers' actual alignment, and is cached per
// configuration (GemmPlan below), so where a buffer happens to sit cannot change the bits.
// Where cuBLASLt's heuristic offers no algorithm for a configuration (what it offers for
// bf16 at 2-byte alignment cannot be known without a GPU), the plan says so and the
// product goes through cuBLAS's cublasGemmStridedBatchedEx, compute 32F, instead: the
// same column-major call, no alignment requirement, also fixed per configuration.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/launchers.cuh"
#include "kernels/gemm_alignment.h"

namespace rz::cuda {

namespace {

template <typename E>
constexpr cudaDataType_t data_type() {
  return std::is_same_v<E, float> ? CUDA_R_32F : CUDA_R_16BF;
}

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// out (N, OC) = bias (OC) broadcast over rows
template <typename E>
__global__ void broadcast_rows_kernel(E* out, const E* bias, int OC, size_t n) {
  RZ_GRID_STRIDE(i, n) out[i] = bias[i % OC];
}

}  // namespace

// Everything cuBLASLt needs for one gemm configuration, built on its first call and kept
// for the backend's life: the matmul descriptor, the three layouts, the alignments the
// shape plans for (kernels/gemm_alignment.h) and the algorithm the heuristic chose for
// them. A d12 step makes about 1,150 gemm calls over a few dozen configurations, so every
// later call is one map lookup and one cublasLtMatmul; and the algorithm -- so the order of
// its sums -- is fixed per configuration, never per address.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  uint32_t align_a = 0, align_b = 0, align_d = 0;
  bool fallback = false;  // cuBLASLt has no algorithm: cublasGemmStridedBatchedEx instead
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

struct GemmPlanCache {
  // transA, transB, m, n, k, lda, ldb, ldd, strideA, strideB, strideD (0 unless batched),
  // batch, A/B type, D type: the alignments follow from these.
  using Key = std::array<long long, 14>;
  std::mutex mu;
  std::map<Key, std::unique_ptr<GemmPlan>> plans;  // nodes never move: plans outlive the lock
  cublasHandle_t fallback = nullptr;                // made by the first fallback plan
  ~GemmPlanCache() {
    if (fallback) cublasDestroy(fallback);
  }
};
GemmPlanCache* new_gemm_plan_cache() { return new GemmPlanCache; }
void delete_gemm_plan_cache(GemmPlanCache* cache) { delete cache; }

namespace {

// The tests' hook (launchers.cuh): every configuration through the cuBLAS fallback.
bool force_fallback() {
  static const bool force = [] {
    const char* v = std::getenv("RINGZERO_GEMM_FALLBACK");
    return v != nullptr && v[0] == '1';
  }();
  return force;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int rows, int cols, long long ld, int batch, long long stride) {
  cublasLtMatrixLayout_t desc = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc, t, uint64_t(rows), uint64_t(cols), int64_t(ld)));
  if (batch > 1) {
    const int32_t count = batch;
    const int64_t offset = stride;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                  sizeof(offset)));
  }
  return desc;
}

// A new plan for the configuration (the arguments as gemm()'s).
std::unique_ptr<GemmPlan> build_plan(const BlasLt& lt, bool transA, bool transB, int m, int n, int k, long long lda,
                                     long long strideA, long long ldb, long long strideB, cudaDataType_t ab,
                                     long long ldd, long long strideD, cudaDataType_t d, int batch) {
  auto plan = std::make_unique<GemmPlan>();
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Stored shapes: op(A) is (m, k), op(B) is (k, n), D is (m, n).
  plan->a = make_layout(ab, transA ? k : m, transA ? m : k, lda, batch, strideA);
  plan->b = make_layout(ab, transB ? n : k, transB ? k : n, ldb, batch, strideB);
  plan->d = make_layout(d, m, n, ldd, batch, strideD);
  plan->align_a = gemm_operand_alignment(lda, strideA, batch, type_bytes(ab));
  plan->align_b = gemm_operand_alignment(ldb, strideB, batch, type_bytes(ab));
  plan->align_d = gemm_operand_alignment(ldd, strideD, batch, type_bytes(d));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  try {
    const uint64_t ws = lt.workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &plan->align_a,
                                                      sizeof(plan->align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &plan->align_b,
                                                      sizeof(plan->align_b)));
    // C is D (beta = 1 accumulates in place).
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &plan->align_d,
                                                      sizeof(plan->align_d)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &plan->align_d,
                                                      sizeof(plan->align_d)));
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.handle, plan->op, plan->a, plan->b, plan->d, plan->d,
                                                             pref, 1, &best, &found);
    // No algorithm (NOT_SUPPORTED, or none found) is not an error: cuBLAS computes it.
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(st);
    plan->fallback = force_fallback() || st == CUBLAS_STATUS_NOT_SUPPORTED || found == 0;
    if (!plan->fallback) plan->algo = best.algo;
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  return plan;
}

}  // namespace

void gemm(const BlasLt& lt, cudaStream_t s, const char* what, bool transA, bool transB, int m, int n, int k,
          const void* A, long long lda, long long strideA, const void* B, long long ldb, long long strideB,
          cudaDataType_t ab, void* D, long long ldd, long long strideD, cudaDataType_t d, int batch, float alpha,
          float beta) {
  if (m == 0 || n == 0 || batch == 0 || (k == 0 && beta == 1.0f)) return;  // nothing to add
  RZ_CHECK(k > 0, "%s: gemm with an empty inner dimension (k = 0) and beta = %g", what, double(beta));
  RZ_CHECK(lt.plans != nullptr, "%s: gemm without the backend's plan cache", what);
  if (batch <= 1) strideA = strideB = strideD = 0;  // not part of the configuration
  const GemmPlanCache::Key key = {transA, transB, m, n, k, lda, ldb, ldd, strideA, strideB, strideD, batch,
                                  (long long)ab, (long long)d};
  const GemmPlan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(lt.plans->mu);
    auto it = lt.plans->plans.find(key);
    if (it == lt.plans->plans.end())
      it = lt.plans->plans
               .emplace(key, build_plan(lt, transA, transB, m, n, k, lda, strideA, ldb, strideB, ab, ldd, strideD, d,
                                        batch))
               .first;
    plan = it->second.get();
    if (plan->fallback && lt.plans->fallback == nullptr) CUBLAS_CHECK(cublasCreate(&lt.plans->fallback));
  }
  // The plan assumed these alignments; an operand off them would read or write wrongly.
  check_gemm_operand(what, "A", A, plan->align_a);
  check_gemm_operand(what, "B", B, plan->align_b);
  check_gemm_operand(what, "D", D, plan->align_d);
  if (plan->fallback) {
    // The same product, column-major, through cuBLAS (no alignment requirement). Its
    // leading dimensions are ints: every ld here is a row length of a tensor, far below.
    RZ_CHECK(lda <= INT32_MAX && ldb <= INT32_MAX && ldd <= INT32_MAX, "%s: leading dimension past INT32_MAX", what);
    const cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasHandle_t h = lt.plans->fallback;  // made with the plan, under the lock
    CUBLAS_CHECK(cublasSetStream(h, s));
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, ab, int(lda), strideA, B, ab,
                                            int(ldb), strideB, &beta, D, d, int(ldd), strideD, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cublasLtMatmul(lt.handle, plan->op, &alpha, A, plan->a, B, plan->b, &beta, D, plan->d, D, plan->d,
                              &plan->algo, lt.workspace, lt.workspace_bytes, s));
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
  gemm(lt, s, "matmul_forward", true, false, OC, N, C, weight, C, 0, inp, C, 0, data_type<E>(), out, OC, 0,
       data_type<E>(), 1, 1.0f, bias ? 1.0f : 0.0f);
}

template <typename E>
void matmul_backward(const BlasLt& lt, E* dinp, E* dweight, const E* dout, const E* inp, const E* weight, int N,
                     int C, int OC, cudaStream_t s) {
  if (dinp) {
    // Row-major dinp (N, C) += dout (N, OC) @ weight (OC, C). Column-major: dinp^T (C, N) +=
    // weight^T (C, OC) * dout^T (OC, N): A = weight seen as (C, OC) ld C, as is; B = dout seen
    // as (OC, N) ld OC, as is; D (m=C, n=N) ld C.
    gemm(lt, s, "matmul_backward (dinp)", false, false, C, N, OC, weight, C, 0, dout, OC, 0, data_type<E>(), dinp, C,
         0, data_type<E>(), 1, 1.0f, 1.0f);
  }
  // Row-major dweight (OC, C) += dout^T (OC, N) @ inp (N, C). Column-major: dweight^T (C, OC)
  // += inp^T (C, N) * dout (N, OC): A = inp seen as (C, N) ld C, as is; B = dout seen as
  // (OC, N) ld OC, transposed to (N, OC); D (m=C, n=OC) ld C.
  gemm(lt, s, "matmul_backward (dweight)", false, true, C, OC, N, inp, C, 0, dout, OC, 0, data_type<E>(), dweight, C,
       0, data_type<E>(), 1, 1.0f, 1.0f);
}

#define RZ_INSTANTIATE(E)                                                                                      \
  template void matmul_forward<E>(const BlasLt&, E*, const E*, const E*, const E*, int, int, int, cudaStream_t); \
  template void matmul_backward<E>(const BlasLt&, E*, E*, const E*, const E*, const E*, int, int, int, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
