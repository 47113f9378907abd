// tests/cuemu/include/cublas_v2.h: the one cuBLAS GEMM ringzero calls (matmul.cu's
// fallback when cuBLASLt offers no algorithm), as the CUDA-on-CPU emulator's stand-in
// (tests/cuemu/runtime/blas.cpp): cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F, the
// same arithmetic as the cuBLASLt stand-in, no alignment requirement, lda/ldb/ldc checked
// against the rows as cuBLAS checks them.
#pragma once

#include "cublas_api.h"
#include "cuda_runtime.h"

typedef struct cublasContext* cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo);
