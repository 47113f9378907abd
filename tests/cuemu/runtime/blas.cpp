// tests/cuemu/runtime/blas.cpp: the cuBLASLt and cuBLAS stand-ins of the CUDA-on-CPU
// emulator (cublasLt.h, cublas_v2.h say what they compute and refuse).
//
// One plain strided-batched GEMM serves both, written from the definition
//   D[b](i, j) = alpha * sum_p op(A[b])(i, p) * op(B[b])(p, j) + beta * C[b](i, j)
// over column-major operands: element (r, c) of a matrix with leading dimension ld sits at
// r + c * ld, batch b starts `stride` elements after batch b - 1, op(X) = X or X^T. The sum
// runs in fp32 in a fixed order (dot, below); bf16 operands are widened exactly; D is
// rounded once (to nearest even for bf16). C is not read when beta is 0, as in cuBLAS.
//
// It is not its own judge: tests/test_cublaslt_conformance.cpp holds it (and, in
// scripts/device-check.sh, the real cuBLASLt) to known answers computed in double by a
// separate loop, one case per configuration ringzero's kernels use.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstring>
#include <string>
#include <vector>

#include "internal.h"

namespace {
constexpr uint64_t kMagic = 0x63756d4c7442736cull;  // "cuemLtBl"
}

struct cublasLtContext {
  uint64_t magic = kMagic;
};
struct cublasContext {
  uint64_t magic = kMagic;
  cudaStream_t stream = nullptr;
};
struct cublasLtMatmulDescOpaque_t {
  uint64_t magic = kMagic;
  int32_t compute = 0;
  int32_t scale = 0;
  int32_t pointer_mode = 0;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};
struct cublasLtMatrixLayoutOpaque_t {
  uint64_t magic = kMagic;
  uint32_t type = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t magic = kMagic;
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: the library's defaults
};

namespace cuemu {
namespace {

thread_local std::string t_status_text;

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t refuse(cublasStatus_t s, std::string why) {
  set_blas_detail(int(s), std::move(why));
  return s;
}

const char* status_string(cublasStatus_t s) {
  const char* detail = blas_detail(int(s));
  if (detail == nullptr) return status_name(s);
  t_status_text = std::string(status_name(s)) + " (cuemu: " + detail + ")";
  return t_status_text.c_str();
}

template <typename T>
cublasStatus_t set_attr(T* field, const void* buf, size_t bytes, const char* what) {
  if (buf == nullptr || bytes != sizeof(T))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt("%s: %zu bytes given, the attribute is %zu bytes", what, bytes, sizeof(T)));
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

size_t type_bytes(uint32_t t) { return t == CUDA_R_32F ? 4 : 2; }
const char* type_name(uint32_t t) {
  return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "another type";
}

// One operand of a GEMM: where, what, and how it is laid out (column-major).
struct Operand {
  const void* p = nullptr;
  uint32_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;

  float at(int64_t batch, int64_t r, int64_t c) const {
    const int64_t i = batch * stride + c * ld + r;
    if (type == CUDA_R_32F) return static_cast<const float*>(p)[i];
    const uint32_t u = uint32_t(static_cast<const uint16_t*>(p)[i]) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  void put(int64_t batch, int64_t r, int64_t c, float v) const {
    const int64_t i = batch * stride + c * ld + r;
    if (type == CUDA_R_32F) {
      const_cast<float*>(static_cast<const float*>(p))[i] = v;
      return;
    }
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const uint16_t bits = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 0x40u)
                                                           : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const_cast<uint16_t*>(static_cast<const uint16_t*>(p))[i] = bits;
  }
  // Bytes from p to one past the last element of the last batch.
  size_t extent_bytes(int64_t batch) const {
    if (rows == 0 || cols == 0 || batch == 0) return 0;
    return size_t((batch - 1) * stride + (cols - 1) * ld + rows) * type_bytes(type);
  }
};

// sum_p x[p] y[p] in fp32, in a fixed order: 16 interleaved partial sums, added pairwise,
// then the tail. Any fixed order is cuBLAS-like; none is cuBLAS's own, which differs by
// algorithm. dot_tile computes 4 x 4 of them in exactly this order (the lanes of a vector
// are the partial sums), so a cell's bits do not depend on whether it fell in a tile.
// blas.cpp is compiled with -ffp-contract=off: no fused multiply-adds in either.
typedef float v16 __attribute__((vector_size(64)));

inline float finish(float (&lane)[16], const float* x, const float* y, int64_t p, int64_t k) {
  float tail = 0.0f;
  for (; p < k; ++p) tail += x[p] * y[p];
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0] + tail;
}

inline float dot(const float* x, const float* y, int64_t k) {
  float lane[16] = {};
  int64_t p = 0;
  for (; p + 16 <= k; p += 16)
    for (int l = 0; l < 16; ++l) lane[l] += x[p + l] * y[p + l];
  return finish(lane, x, y, p, k);
}

void dot_tile(const float* const (&x)[4], const float* const (&y)[4], int64_t k, float (&out)[4][4]) {
  v16 acc[4][4] = {};
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    v16 xv[4], yv[4];
    for (int r = 0; r < 4; ++r) std::memcpy(&xv[r], x[r] + p, sizeof(v16));
    for (int c = 0; c < 4; ++c) std::memcpy(&yv[c], y[c] + p, sizeof(v16));
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] += xv[r] * yv[c];
  }
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      float lane[16];
      std::memcpy(lane, &acc[r][c], sizeof lane);
      out[r][c] = finish(lane, x[r], y[c], p, k);
    }
}

// The definition, at the top of the file. Each batch's op(A) is first copied into fp32 rows
// of k (ap) and op(B) into fp32 columns of k (bp), so every output element is one
// contiguous dot product, computed 4 x 4 at a time; the smaller of ap and bp stays in
// cache while the larger streams past it.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha, const Operand& A,
          const Operand& B, float beta, const Operand& C, const Operand& D) {
  std::vector<float> ap(size_t(m * k)), bp(size_t(n * k));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) ap[size_t(i * k + p)] = ta ? A.at(b, p, i) : A.at(b, i, p);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) bp[size_t(j * k + p)] = tb ? B.at(b, j, p) : B.at(b, p, j);
    auto store = [&](int64_t i, int64_t j, float sum) {
      float r = alpha * sum;
      if (beta != 0.0f) r += beta * C.at(b, i, j);
      D.put(b, i, j, r);
    };
    // Cells [i0, i0 + 4) x [j0, j0 + 4): a tile where both fit, else one by one.
    auto block = [&](int64_t i0, int64_t j0) {
      if (i0 + 4 <= m && j0 + 4 <= n) {
        const float* const x[4] = {&ap[size_t(i0 * k)], &ap[size_t((i0 + 1) * k)], &ap[size_t((i0 + 2) * k)],
                                   &ap[size_t((i0 + 3) * k)]};
        const float* const y[4] = {&bp[size_t(j0 * k)], &bp[size_t((j0 + 1) * k)], &bp[size_t((j0 + 2) * k)],
                                   &bp[size_t((j0 + 3) * k)]};
        float out[4][4];
        dot_tile(x, y, k, out);
        for (int r = 0; r < 4; ++r)
          for (int c = 0; c < 4; ++c) store(i0 + r, j0 + c, out[r][c]);
        return;
      }
      for (int64_t i = i0; i < m && i < i0 + 4; ++i)
        for (int64_t j = j0; j < n && j < j0 + 4; ++j) store(i, j, dot(&ap[size_t(i * k)], &bp[size_t(j * k)], k));
    };
    if (m <= n) {
      for (int64_t j = 0; j < n; j += 4)
        for (int64_t i = 0; i < m; i += 4) block(i, j);
    } else {
      for (int64_t i = 0; i < m; i += 4)
        for (int64_t j = 0; j < n; j += 4) block(i, j);
    }
  }
}

// The type combinations both stand-ins compute.
bool supported_types(uint32_t ab, uint32_t cd) {
  return (ab == CUDA_R_32F && cd == CUDA_R_32F) || (ab == CUDA_R_16BF && (cd == CUDA_R_16BF || cd == CUDA_R_32F));
}

// Inside device memory, or refused.
cublasStatus_t check_extent(const char* call, const char* name, const Operand& o, int64_t batch) {
  const size_t bytes = o.extent_bytes(batch);
  if (bytes == 0) return CUBLAS_STATUS_SUCCESS;
  if (!device_addressable(o.p, bytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt("%s: operand %s (%lld x %lld, ld %lld, %lld batches %lld apart) spans %zu bytes from %s, "
                      "beyond one device allocation",
                      call, name, (long long)o.rows, (long long)o.cols, (long long)o.ld, (long long)batch,
                      (long long)o.stride, bytes, describe_pointer(o.p).c_str()));
  return CUBLAS_STATUS_SUCCESS;
}

// A matmul's descriptors, checked: the shapes (m, n, k), the batch, the operands' layouts.
struct LtConfig {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const cublasLtMatrixLayoutOpaque_t* lay[4] = {};  // A, B, C, D
};

cublasStatus_t check_config(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, LtConfig* cfg) {
  if (op == nullptr || op->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "not a matmul descriptor");
  const cublasLtMatrixLayoutOpaque_t* lay[4] = {a, b, c, d};
  const char* names = "ABCD";
  for (int i = 0; i < 4; ++i) {
    if (lay[i] == nullptr || lay[i]->magic != kMagic)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt("layout %c is not a matrix layout", names[i]));
    if (lay[i]->order != CUBLASLT_ORDER_COL)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("layout %c: only column-major order is emulated", names[i]));
    if (lay[i]->ld < int64_t(lay[i]->rows) || lay[i]->ld < 1)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt("layout %c: leading dimension %lld is below its %llu rows",
                                                     names[i], (long long)lay[i]->ld,
                                                     (unsigned long long)lay[i]->rows));
    if (lay[i]->stride < 0)
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("layout %c: a negative batch stride", names[i]));
    cfg->lay[i] = lay[i];
  }
  if (op->compute != CUBLAS_COMPUTE_32F || op->scale != CUDA_R_32F)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_COMPUTE_32F with fp32 scale is emulated");
  if (op->pointer_mode != 0) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only host alpha and beta are emulated");
  if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("epilogue %u is not emulated", op->epilogue));
  if ((op->transa != CUBLAS_OP_N && op->transa != CUBLAS_OP_T) || (op->transb != CUBLAS_OP_N && op->transb != CUBLAS_OP_T))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_OP_N and CUBLAS_OP_T are emulated");
  if (a->type != b->type || c->type != d->type || !supported_types(a->type, d->type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("A %s, B %s, C %s, D %s: not a type combination the stand-in "
                                                   "computes (fp32; bf16 into bf16 or fp32)",
                                                   type_name(a->type), type_name(b->type), type_name(c->type),
                                                   type_name(d->type)));
  cfg->ta = op->transa == CUBLAS_OP_T;
  cfg->tb = op->transb == CUBLAS_OP_T;
  cfg->m = int64_t(d->rows);
  cfg->n = int64_t(d->cols);
  const int64_t a_rows = int64_t(cfg->ta ? a->cols : a->rows), a_cols = int64_t(cfg->ta ? a->rows : a->cols);
  const int64_t b_rows = int64_t(cfg->tb ? b->cols : b->rows), b_cols = int64_t(cfg->tb ? b->rows : b->cols);
  cfg->k = a_cols;
  if (a_rows != cfg->m || b_rows != cfg->k || b_cols != cfg->n || c->rows != d->rows || c->cols != d->cols)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt("shapes do not chain: op(A) %lld x %lld, op(B) %lld x %lld, C %llu x %llu, D %llu x %llu",
                      (long long)a_rows, (long long)a_cols, (long long)b_rows, (long long)b_cols,
                      (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)d->rows,
                      (unsigned long long)d->cols));
  cfg->batch = d->batch;
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch || d->batch < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt("batch counts A %d, B %d, C %d, D %d differ", a->batch, b->batch,
                                                   c->batch, d->batch));
  return CUBLAS_STATUS_SUCCESS;
}

// The alignment an algorithm chosen for `asked` bytes needs of an operand: what was asked,
// at most 16 (the widest vector access), at most what the leading dimension and batch
// stride allow, at least the element size.
uint32_t needed_alignment(uint32_t asked, const cublasLtMatrixLayoutOpaque_t* l) {
  const size_t esz = type_bytes(l->type);
  uint64_t bits = uint64_t(l->ld) * esz | 16;
  if (l->batch > 1) bits |= uint64_t(l->stride) * esz;
  uint32_t natural = uint32_t(bits & (~bits + 1));
  uint32_t need = asked < natural ? asked : natural;
  return need < esz ? uint32_t(esz) : need;
}

constexpr uint64_t kAlgoMagic = 0x6f676c4175656d63ull;  // "cuemAlgo"

}  // namespace
}  // namespace cuemu

using cuemu::fmt;
using cuemu::refuse;

const char* cublasLtGetStatusString(cublasStatus_t status) { return cuemu::status_string(status); }
const char* cublasLtGetStatusName(cublasStatus_t status) { return cuemu::status_name(status); }
const char* cublasGetStatusString(cublasStatus_t status) { return cuemu::status_string(status); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: null handle");
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr || handle->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy");
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: null descriptor");
  *desc = new cublasLtMatmulDescOpaque_t;
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  if (desc == nullptr) return CUBLAS_STATUS_SUCCESS;
  desc->magic = 0;
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (desc == nullptr || desc->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "not a matmul descriptor");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return cuemu::set_attr(&desc->compute, buf, bytes, "COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return cuemu::set_attr(&desc->scale, buf, bytes, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return cuemu::set_attr(&desc->pointer_mode, buf, bytes, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA: return cuemu::set_attr(&desc->transa, buf, bytes, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return cuemu::set_attr(&desc->transb, buf, bytes, "TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return cuemu::set_attr(&desc->epilogue, buf, bytes, "EPILOGUE");
  }
  return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("matmul descriptor attribute %d is not emulated", int(attr)));
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: null layout");
  *layout = new cublasLtMatrixLayoutOpaque_t;
  (*layout)->type = uint32_t(type);
  (*layout)->rows = rows;
  (*layout)->cols = cols;
  (*layout)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  if (layout == nullptr) return CUBLAS_STATUS_SUCCESS;
  layout->magic = 0;
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  if (layout == nullptr || layout->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "not a matrix layout");
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return cuemu::set_attr(&layout->type, buf, bytes, "LAYOUT_TYPE");
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return cuemu::set_attr(&layout->order, buf, bytes, "LAYOUT_ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return cuemu::set_attr(&layout->rows, buf, bytes, "LAYOUT_ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return cuemu::set_attr(&layout->cols, buf, bytes, "LAYOUT_COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return cuemu::set_attr(&layout->ld, buf, bytes, "LAYOUT_LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return cuemu::set_attr(&layout->batch, buf, bytes, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return cuemu::set_attr(&layout->stride, buf, bytes, "STRIDED_BATCH_OFFSET");
  }
  return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("matrix layout attribute %d is not emulated", int(attr)));
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: null preference");
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  pref->magic = 0;
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (pref == nullptr || pref->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "not a matmul preference");
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return cuemu::set_attr(&pref->search_mode, buf, bytes, "SEARCH_MODE");
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return cuemu::set_attr(&pref->max_workspace, buf, bytes, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return cuemu::set_attr(&pref->align[0], buf, bytes, "MIN_ALIGNMENT_A");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return cuemu::set_attr(&pref->align[1], buf, bytes, "MIN_ALIGNMENT_B");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return cuemu::set_attr(&pref->align[2], buf, bytes, "MIN_ALIGNMENT_C");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return cuemu::set_attr(&pref->align[3], buf, bytes, "MIN_ALIGNMENT_D");
  }
  return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("preference attribute %d is not emulated", int(attr)));
}

// One algorithm for every configuration the stand-in computes: it needs no workspace and the
// alignment the preference allowed (see needed_alignment).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr || handle->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "no cuBLASLt handle");
  if (returned == nullptr || results == nullptr || requested <= 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: no room for a result");
  if (pref == nullptr || pref->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "not a matmul preference");
  *returned = 0;
  cuemu::LtConfig cfg;
  const cublasStatus_t st = cuemu::check_config(op, a, b, c, d, &cfg);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = cuemu::kAlgoMagic;
  for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = cuemu::needed_alignment(pref->align[i], cfg.lay[i]);
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  if (handle == nullptr || handle->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "no cuBLASLt handle");
  cuemu::LtConfig cfg;
  cublasStatus_t st = cuemu::check_config(op, a, b, c, d, &cfg);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (alpha == nullptr || beta == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: null alpha or beta");
  if (!cuemu::valid_stream(stream))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt("cublasLtMatmul: stream %p is not a live stream",
                                                   static_cast<void*>(stream)));
  if (workspace_bytes > 0 && !cuemu::device_addressable(workspace, workspace_bytes))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt("cublasLtMatmul: workspace %s + %zu bytes is not device memory",
                                                   cuemu::describe_pointer(workspace).c_str(), workspace_bytes));
  uint32_t need[4];
  if (algo != nullptr) {
    if (algo->data[0] != cuemu::kAlgoMagic)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: not an algorithm the heuristic returned");
    for (int i = 0; i < 4; ++i) need[i] = uint32_t(algo->data[1 + i]);
  } else {
    for (int i = 0; i < 4; ++i) need[i] = cuemu::needed_alignment(256, cfg.lay[i]);
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const void* ptrs[4] = {A, B, C, D};
  cuemu::Operand ops[4];
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    const cublasLtMatrixLayoutOpaque_t* l = cfg.lay[i];
    ops[i] = cuemu::Operand{ptrs[i], l->type, int64_t(l->rows), int64_t(l->cols), l->ld, l->stride};
    if (i == 2 && be == 0.0f) continue;  // C is not read
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % need[i] != 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    fmt("cublasLtMatmul: operand %s at %p is not %u-byte aligned, the alignment of the algorithm "
                        "the heuristic chose", names[i], ptrs[i], need[i]));
    if ((st = cuemu::check_extent("cublasLtMatmul", names[i], ops[i], cfg.batch)) != CUBLAS_STATUS_SUCCESS) return st;
  }
  if (cfg.m == 0 || cfg.n == 0) return CUBLAS_STATUS_SUCCESS;
  cuemu::gemm(cfg.ta, cfg.tb, cfg.m, cfg.n, cfg.k, cfg.batch, al, ops[0], ops[1], be, ops[2], ops[3]);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: null handle");
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr || handle->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy");
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr || handle->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "no cuBLAS handle");
  if (!cuemu::valid_stream(stream))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fmt("cublasSetStream: %p is not a live stream", static_cast<void*>(stream)));
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  if (handle == nullptr || handle->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "no cuBLAS handle");
  if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_OP_N and CUBLAS_OP_T are emulated");
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  const int a_rows = ta ? k : m, b_rows = tb ? n : k;
  auto at_least_one = [](int x) { return x > 1 ? x : 1; };
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || lda < at_least_one(a_rows) || ldb < at_least_one(b_rows) ||
      ldc < at_least_one(m) || strideA < 0 || strideB < 0 || strideC < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fmt("cublasGemmStridedBatchedEx: m %d n %d k %d batch %d, lda %d (rows %d), ldb %d (rows %d), ldc %d",
                      m, n, k, batchCount, lda, a_rows, ldb, b_rows, ldc));
  if (computeType != CUBLAS_COMPUTE_32F || algo != CUBLAS_GEMM_DEFAULT)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_COMPUTE_32F with CUBLAS_GEMM_DEFAULT is emulated");
  if (Atype != Btype || !cuemu::supported_types(Atype, Ctype))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fmt("A %s, B %s, C %s: not a type combination the stand-in computes",
                                                   cuemu::type_name(Atype), cuemu::type_name(Btype),
                                                   cuemu::type_name(Ctype)));
  if (alpha == nullptr || beta == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null alpha or beta");
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const cuemu::Operand oa{A, uint32_t(Atype), a_rows, ta ? m : k, lda, strideA};
  const cuemu::Operand ob{B, uint32_t(Btype), b_rows, tb ? k : n, ldb, strideB};
  const cuemu::Operand oc{C, uint32_t(Ctype), m, n, ldc, strideC};
  cublasStatus_t st;
  if ((st = cuemu::check_extent("cublasGemmStridedBatchedEx", "A", oa, batchCount)) != CUBLAS_STATUS_SUCCESS ||
      (st = cuemu::check_extent("cublasGemmStridedBatchedEx", "B", ob, batchCount)) != CUBLAS_STATUS_SUCCESS ||
      (st = cuemu::check_extent("cublasGemmStridedBatchedEx", "C", oc, batchCount)) != CUBLAS_STATUS_SUCCESS)
    return st;
  cuemu::gemm(ta, tb, m, n, k, batchCount, al, oa, ob, be, oc, oc);
  return CUBLAS_STATUS_SUCCESS;
}
