// tests/test_cublaslt_conformance.cpp: the cuBLASLt and cuBLAS calls ringzero makes, held to
// answers computed in double by a plain loop written from the definition
//   D[b](i, j) = alpha * sum_p op(A[b])(i, p) op(B[b])(p, j) + beta * C[b](i, j)
// (column-major: element (r, c) at r + c * ld; batch b at b * stride; op(X) = X or X^T).
//
// Why: the CUDA-on-CPU emulator's stand-in (tests/cuemu/runtime/blas.cpp) and the code that
// calls it (kernels/cuda/matmul.cu, attention.cu) were written by the same hands, so a
// shared misreading of a transpose or a leading dimension would pass every emulated test.
// This program is the third reading, and it runs against both: built against the stand-in
// in CI (test_cublaslt_conformance_cuemu), against the real cuBLASLt and cuBLAS on a
// device (scripts/device-check.sh correct). One case per configuration the backend uses
// (transA, transB, leading dimensions, batch, stride, alpha, beta, dtypes), at small
// shapes whose relations are the backend's, with the alignment preferences the backend
// gives (kernels/gemm_alignment.h); each through cublasLtMatmul (when the heuristic offers
// an algorithm: which configurations have none is printed, it is what the backend's
// fallback is for) and through cublasGemmStridedBatchedEx (the fallback).
// Inputs are small integers, so every sum is exact in fp32 and the only rounding is the
// final one: the tolerance is an ulp, whatever order the library sums in. Elements between
// the matrices (what a wrong leading dimension or stride would read or write) hold NaN and
// must still hold it afterwards.
#include <catch2/catch.hpp>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gemm_alignment.h"
#include "tests/catch_runner.h"

namespace {

#define REQUIRE_CUDA(x) REQUIRE((x) == cudaSuccess)

struct Case {
  const char* name;  // the call site, as matmul.cu / attention.cu name it
  bool ta, tb;
  int m, n, k;
  long long lda, sa, ldb, sb, ldd, sd;
  int batch;
  float alpha, beta;
  cudaDataType_t ab, d;
};

size_t esize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
const char* tname(cudaDataType_t t) { return t == CUDA_R_32F ? "fp32" : "bf16"; }

float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // inputs here are finite
}

// A matrix operand's host image: `elems` elements, NaN except where a batch's matrix lies.
struct Image {
  cudaDataType_t type;
  std::vector<unsigned char> bytes;
  size_t elems = 0;
  void init(cudaDataType_t t, size_t n) {
    type = t;
    elems = n;
    bytes.assign(n * esize(t), 0);
    for (size_t i = 0; i < n; ++i) set(i, NAN);
  }
  void set(size_t i, float v) {
    if (type == CUDA_R_32F) std::memcpy(&bytes[i * 4], &v, 4);
    else {
      const uint16_t b = std::isnan(v) ? uint16_t(0x7fc0) : float_to_bf16_bits(v);
      std::memcpy(&bytes[i * 2], &b, 2);
    }
  }
  float get(size_t i) const {
    if (type == CUDA_R_32F) {
      float v;
      std::memcpy(&v, &bytes[i * 4], 4);
      return v;
    }
    uint16_t b;
    std::memcpy(&b, &bytes[i * 2], 2);
    return bf16_bits_to_float(b);
  }
};

// Elements of a (rows, cols) column-major matrix with leading dimension ld, batch batches
// stride apart: the offsets a correct call touches.
template <typename F>
void each_element(int rows, int cols, long long ld, long long stride, int batch, F f) {
  for (int b = 0; b < batch; ++b)
    for (int c = 0; c < cols; ++c)
      for (int r = 0; r < rows; ++r) f(b, r, c, size_t(b * stride + c * ld + r));
}
size_t extent(int rows, int cols, long long ld, long long stride, int batch) {
  return size_t((batch - 1) * stride + (cols - 1) * ld + rows);
}

// The configurations of kernels/cuda/matmul.cu and attention.cu (their comments give the
// row-major products), at N = 5 rows, C = 16, OC = 24, T = 5 or 8, NH = 2 heads of hs = 8.
std::vector<Case> backend_cases() {
  std::vector<Case> cs;
  const int N = 5, C = 16, OC = 24, NH = 2, hs = 8;
  for (cudaDataType_t E : {CUDA_R_32F, CUDA_R_16BF}) {
    for (float beta : {0.0f, 1.0f})  // without and with a bias broadcast first
      cs.push_back({"matmul_forward", true, false, OC, N, C, C, 0, C, 0, OC, 0, 1, 1.0f, beta, E, E});
    cs.push_back({"matmul_backward (dinp)", false, false, C, N, OC, C, 0, OC, 0, C, 0, 1, 1.0f, 1.0f, E, E});
    cs.push_back({"matmul_backward (dweight)", false, true, C, OC, N, C, 0, OC, 0, C, 0, 1, 1.0f, 1.0f, E, E});
    for (int T : {8, 5}) {  // T = 5: att's rows of 5 elements, 2-byte aligned in bf16
      const long long C3 = 3 * C, TT = (long long)T * T;
      const float scale = 1.0f / std::sqrt(float(hs));
      cs.push_back({"attention_forward (scores)", true, false, T, T, hs, C3, hs, C3, hs, T, TT, NH, scale, 0.0f, E,
                    CUDA_R_32F});
      cs.push_back({"attention_forward (att @ v)", false, false, hs, T, T, C3, hs, T, TT, C, hs, NH, 1.0f, 0.0f, E, E});
      cs.push_back({"attention_backward (datt)", true, false, T, T, hs, C3, hs, C, hs, T, TT, NH, 1.0f, 0.0f, E,
                    CUDA_R_32F});
      cs.push_back({"attention_backward (dv)", false, true, hs, T, T, C, hs, T, TT, C3, hs, NH, 1.0f, 1.0f, E, E});
      cs.push_back({"attention_backward (dq)", false, false, hs, T, T, C3, hs, T, TT, C3, hs, NH, 1.0f, 1.0f, E, E});
      cs.push_back({"attention_backward (dk)", false, true, hs, T, T, C3, hs, T, TT, C3, hs, NH, 1.0f, 1.0f, E, E});
    }
  }
  return cs;
}

struct Operands {
  Image a, b, d0, want;  // d0: D before the call (C = D); want: the expected D
};

// Inputs of small integers; the expected D in double from the definition.
Operands make_operands(const Case& c) {
  const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  Operands o;
  o.a.init(c.ab, extent(a_rows, a_cols, c.lda, c.sa, c.batch));
  o.b.init(c.ab, extent(b_rows, b_cols, c.ldb, c.sb, c.batch));
  o.d0.init(c.d, extent(c.m, c.n, c.ldd, c.sd, c.batch));
  each_element(a_rows, a_cols, c.lda, c.sa, c.batch, [&](int b, int r, int col, size_t i) {
    o.a.set(i, float((b * 7 + r * 3 + col * 5) % 9 - 4));
  });
  each_element(b_rows, b_cols, c.ldb, c.sb, c.batch, [&](int b, int r, int col, size_t i) {
    o.b.set(i, float((b * 5 + r * 2 + col * 7 + 1) % 7 - 3));
  });
  each_element(c.m, c.n, c.ldd, c.sd, c.batch, [&](int b, int r, int col, size_t i) {
    o.d0.set(i, c.beta != 0.0f ? float((b + r * 5 + col * 3) % 11 - 5) : NAN);  // beta = 0: C is never read
  });
  o.want = o.d0;
  each_element(c.m, c.n, c.ldd, c.sd, c.batch, [&](int b, int i, int j, size_t at) {
    double sum = 0;
    for (int p = 0; p < c.k; ++p) {
      const double x = o.a.get(size_t(b * c.sa + (c.ta ? p + i * c.lda : i + p * c.lda)));
      const double y = o.b.get(size_t(b * c.sb + (c.tb ? j + p * c.ldb : p + j * c.ldb)));
      sum += x * y;
    }
    double v = double(c.alpha) * sum;
    if (c.beta != 0.0f) v += double(c.beta) * o.d0.get(at);
    o.want.set(at, float(v));  // through float: bf16 rounds from the fp32 nearest, as a GPU does
  });
  return o;
}

struct Device {
  void* p = nullptr;
  explicit Device(const Image& img) {
    REQUIRE_CUDA(cudaMalloc(&p, img.bytes.size()));
    REQUIRE_CUDA(cudaMemcpy(p, img.bytes.data(), img.bytes.size(), cudaMemcpyHostToDevice));
  }
  ~Device() { (void)cudaFree(p); }
  Image read(const Image& like) const {
    Image out = like;
    REQUIRE_CUDA(cudaMemcpy(out.bytes.data(), p, out.bytes.size(), cudaMemcpyDeviceToHost));
    return out;
  }
};

// D after the call against the expectation: within an ulp of the output type; elements
// outside the matrices untouched (still NaN, bit for bit).
void check_result(const char* path, const Case& c, const Image& got, const Operands& o) {
  std::vector<bool> inside(got.elems, false);
  each_element(c.m, c.n, c.ldd, c.sd, c.batch, [&](int, int, int, size_t i) { inside[i] = true; });
  size_t bad = 0;
  std::string first;
  const double ulp = c.d == CUDA_R_32F ? std::ldexp(1.0, -23) : std::ldexp(1.0, -7);
  for (size_t i = 0; i < got.elems; ++i) {
    const double g = got.get(i), w = o.want.get(i);
    const bool ok = inside[i] ? std::fabs(g - w) <= ulp * std::fabs(w) + 1e-6
                              : std::memcmp(&got.bytes[i * esize(c.d)], &o.d0.bytes[i * esize(c.d)], esize(c.d)) == 0;
    if (!ok && bad++ < 3) first += "\n  [" + std::to_string(i) + "] " + (inside[i] ? "" : "(between matrices) ") +
                                   "got " + std::to_string(g) + ", want " + std::to_string(w);
  }
  INFO(path << ", " << c.name << " " << tname(c.ab) << "->" << tname(c.d) << ": " << bad << " wrong" << first);
  CHECK(bad == 0);
}

// Through cuBLASLt as matmul.cu builds its plans. Returns false when the heuristic offers
// no algorithm (the backend then takes the cuBLAS fallback).
bool run_lt(cublasLtHandle_t lt, const Case& c, const Operands& o) {
  cublasLtMatmulDesc_t op = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t ta = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS);
  auto layout = [&](cudaDataType_t t, int rows, int cols, long long ld, long long stride) {
    cublasLtMatrixLayout_t l = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld) == CUBLAS_STATUS_SUCCESS);
    if (c.batch > 1) {
      const int32_t count = c.batch;
      const int64_t offset = stride;
      REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count) ==
              CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                               sizeof offset) == CUBLAS_STATUS_SUCCESS);
    }
    return l;
  };
  cublasLtMatrixLayout_t la = layout(c.ab, c.ta ? c.k : c.m, c.ta ? c.m : c.k, c.lda, c.sa);
  cublasLtMatrixLayout_t lb = layout(c.ab, c.tb ? c.n : c.k, c.tb ? c.k : c.n, c.ldb, c.sb);
  cublasLtMatrixLayout_t ld = layout(c.d, c.m, c.n, c.ldd, c.sd);
  cublasLtMatmulPreference_t pref = nullptr;
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  const uint32_t align_a = rz::gemm_operand_alignment(c.lda, c.sa, c.batch, esize(c.ab)),
                 align_b = rz::gemm_operand_alignment(c.ldb, c.sb, c.batch, esize(c.ab)),
                 align_d = rz::gemm_operand_alignment(c.ldd, c.sd, c.batch, esize(c.d));
  const uint64_t ws = 0;
  REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
          CUBLAS_STATUS_SUCCESS);
  for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d}})
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, attr, v, sizeof *v) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &best, &found);
  const bool offered = st == CUBLAS_STATUS_SUCCESS && found > 0;
  std::printf("  %-28s %s->%s  align A %2u B %2u D %2u  cuBLASLt: %s\n", c.name, tname(c.ab), tname(c.d), align_a,
              align_b, align_d, offered ? "an algorithm" : st == CUBLAS_STATUS_SUCCESS ? "no algorithm" : cublasLtGetStatusString(st));
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) CHECK(st == CUBLAS_STATUS_SUCCESS);
  if (offered) {
    Device A(o.a), B(o.b), D(o.d0);
    REQUIRE(cublasLtMatmul(lt, op, &c.alpha, A.p, la, B.p, lb, &c.beta, D.p, ld, D.p, ld, &best.algo, nullptr, 0,
                           nullptr) == CUBLAS_STATUS_SUCCESS);
    REQUIRE_CUDA(cudaDeviceSynchronize());
    check_result("cublasLtMatmul", c, D.read(o.d0), o);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  return offered;
}

void run_cublas(cublasHandle_t h, const Case& c, const Operands& o) {
  Device A(o.a), B(o.b), D(o.d0);
  REQUIRE(cublasGemmStridedBatchedEx(h, c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, c.tb ? CUBLAS_OP_T : CUBLAS_OP_N, c.m, c.n,
                                     c.k, &c.alpha, A.p, c.ab, int(c.lda), c.sa, B.p, c.ab, int(c.ldb), c.sb, &c.beta,
                                     D.p, c.d, int(c.ldd), c.sd, c.batch, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  REQUIRE_CUDA(cudaDeviceSynchronize());
  check_result("cublasGemmStridedBatchedEx", c, D.read(o.d0), o);
}

}  // namespace

TEST_CASE("every GEMM configuration of matmul.cu and attention.cu, through cuBLASLt and cuBLAS") {
  cudaDeviceProp prop{};
  REQUIRE_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("on %s\n", prop.name);
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t h = nullptr;
  REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  int offered = 0;
  const std::vector<Case> cases = backend_cases();
  for (const Case& c : cases) {
    CAPTURE(c.name, tname(c.ab), c.m, c.n, c.k, c.batch);
    const Operands o = make_operands(c);
    offered += run_lt(lt, c, o);
    run_cublas(h, c, o);
  }
  std::printf("cuBLASLt offered an algorithm for %d of %zu configurations; cuBLAS computed all\n", offered,
              cases.size());
  cublasDestroy(h);
  cublasLtDestroy(lt);
}

// What cuBLASLt documents as impossible: a column-major leading dimension below the rows.
TEST_CASE("a leading dimension below the rows is refused") {
  cublasLtHandle_t lt = nullptr;
  REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, 8, 4, 6) == CUBLAS_STATUS_SUCCESS);  // ld 6 < 8 rows
  REQUIRE(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, 4, 3, 4) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, 8, 3, 8) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, d, d, pref, 1, &best, &found);
  INFO(cublasLtGetStatusString(st) << ", " << found << " algorithm(s)");
  CHECK((st != CUBLAS_STATUS_SUCCESS || found == 0));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
}

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("test_cublaslt_conformance: SKIPPED: no CUDA device visible to this process\n");
    return 77;
  }
  return rz::test::run_catch_session(argc, argv);
}
