// kernels/cuda/launchers.cuh: the typed launchers, the middle of ggml's three layers:
//   __global__ kernel (in its family's .cu)  ->  launcher here (device pointers, sizes,
//   cudaStream_t; checks the launch)  ->  CudaBackend's op (kernels/cuda/cuda_backend.cu,
//   which owns the stream, the cuBLASLt handle and the scratch memory).
// E is float or bf16_t. Every pointer is a device pointer; shapes use the legend of
// kernels/backend.h (B batch, T time, C channels, OC output channels, NH (query) heads, NKV
// key/value heads, hs head size, N rows, V vocab, Vp padded vocab, H the gated MLP's
// width). Each launcher has the arithmetic of the CPU kernel of the same name in
// kernels/cpu, its reference.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/common.cuh"

namespace rz::cuda {

// One cuBLASLt plan per gemm configuration (descriptors, layouts, the alignments its
// shape plans for and the algorithm chosen for them), built on first use (matmul.cu):
// saves rebuilding them on every call, and keeps the choice -- and so the bits -- fixed by
// the configuration, never by where the operands sit.
struct GemmPlanCache;
GemmPlanCache* new_gemm_plan_cache();
void delete_gemm_plan_cache(GemmPlanCache* cache);

// cuBLASLt handle, the workspace its kernels may use, the plan cache (owned by the
// backend; it also holds the cuBLAS handle of the fallback below, made on first need).
struct BlasLt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  GemmPlanCache* plans = nullptr;
};

// --- encoder.cu
template <typename E>
void encoder_forward(E* out, const int* inp, const E* wte, const E* wpe,  // (B,T,C) (B,T) (Vp,C) (maxT,C)
                     int B, int T, int C, cudaStream_t s);
// dwpe[t,:] += sum_b dout[b,t,:], b in order.
template <typename E>
void encoder_backward_wpe(E* dwpe, const E* dout, int B, int T, int C, cudaStream_t s);
// dwte[token[k],:] += sum over positions[start[k] .. start[k+1]) of dout[pos,:], in order.
// One bucket per distinct token (built on the host), so no two blocks write one row.
template <typename E>
void encoder_backward_wte(E* dwte, const E* dout,                 // (Vp,C), (B*T,C)
                          const int* bucket_token,                // (nbuckets)
                          const int* bucket_start,                // (nbuckets + 1)
                          const int* positions,                   // (B*T) grouped by bucket
                          int nbuckets, int C, cudaStream_t s);

// --- layernorm.cu
// Column sums over N rows without atomics (layernorm's dweight and dbias, matmul's dbias,
// rmsnorm's dweight): stage 1 writes one fp32 partial per chunk of kColumnChunkRows rows
// and column; stage 2 (column_finish) adds the chunks' partials in chunk order into out.
constexpr int kColumnChunkRows = 64;
int column_chunks(int N);  // chunks for N rows (refused past 65535, the grid's y limit)
// out[c] += sum_chunk partial[chunk*C + c], chunks in order. out (C), partial (nchunks, C).
template <typename E>
void column_finish(E* out, const float* partial, int nchunks, int C, cudaStream_t s);
template <typename E>
void layernorm_forward(E* out, float* mean, float* rstd, const E* inp, const E* weight, const E* bias,
                       int N, int C, cudaStream_t s);
// Floats of scratch that layernorm_backward and bias_backward need for (N, C).
size_t column_partials_floats(int N, int C);
template <typename E>
void layernorm_backward(E* dinp, E* dweight, E* dbias, const E* dout, const E* inp, const E* weight,
                        const float* mean, const float* rstd, int N, int C,
                        float* partials,  // 2 * column_partials_floats(N, C)
                        cudaStream_t s);

// --- matmul.cu
template <typename E>
void matmul_forward(const BlasLt& lt, E* out, const E* inp, const E* weight, const E* bias,
                    int N, int C, int OC, cudaStream_t s);
// dinp += dout @ weight (dinp may be null); dweight += dout^T @ inp.
template <typename E>
void matmul_backward(const BlasLt& lt, E* dinp, E* dweight, const E* dout, const E* inp, const E* weight,
                     int N, int C, int OC, cudaStream_t s);
// dbias (OC) += column sums of dout (N, OC), in a fixed order (no atomics).
template <typename E>
void bias_backward(E* dbias, const E* dout, int N, int OC,
                   float* partials,  // column_partials_floats(N, OC)
                   cudaStream_t s);
// D = alpha op(A) op(B) + beta D, column-major (cuBLAS's convention), `batch` matrices
// apart by the strides (in elements). A, B of type ab; D of type d (fp32 accumulate).
// Each operand must meet the alignment its leading dimension and stride plan for
// (kernels/gemm_alignment.h); one that does not fails naming `what` and the operand.
// Through cuBLASLt; where its heuristic offers no algorithm for the configuration (bf16
// operands 2-byte aligned, say: `sample` at odd lengths), through cuBLAS's
// cublasGemmStridedBatchedEx, which needs no alignment. RINGZERO_GEMM_FALLBACK=1 in the
// environment sends every configuration there (the tests' hook: the fallback cannot be
// made to happen otherwise where cuBLASLt always has an algorithm).
void gemm(const BlasLt& lt, cudaStream_t s, const char* what, bool transA, bool transB, int m, int n, int k,
          const void* A, long long lda, long long strideA, const void* B, long long ldb, long long strideB,
          cudaDataType_t ab, void* D, long long ldd, long long strideD, cudaDataType_t d, int batch,
          float alpha, float beta);

// --- attention.cu (materialised: scores through cuBLASLt, a causal softmax kernel).
// Grouped-query: qkv (B, T, C + 2*NKV*hs), query head h reads kv head h / (NH/NKV).
template <typename E>
void attention_forward(const BlasLt& lt, E* out, E* att, const E* qkv, int B, int T, int C, int NH, int NKV,
                       float* scores,  // (NH, T, T) scratch
                       cudaStream_t s);
template <typename E>
void attention_backward(const BlasLt& lt, E* dqkv, const E* dout, const E* qkv, const E* att,
                        int B, int T, int C, int NH, int NKV,
                        float* datt,  // (NH, T, T) scratch
                        E* dpre,      // (NH, T, T) scratch
                        cudaStream_t s);

// --- attention_flash.cu (no (T, T) matrix: online softmax forward, lse-recomputing backward)
int flash_max_head_size();  // hs above this is refused
template <typename E>
void attention_forward_flash(E* out, float* lse, const E* qkv, int B, int T, int C, int NH, int NKV,
                             cudaStream_t s);
template <typename E>
void attention_backward_flash(E* dqkv, const E* dout, const E* qkv, const float* lse, int B, int T, int C, int NH,
                              int NKV,
                              float* D,  // (B, NH, T) scratch
                              cudaStream_t s);

// --- rmsnorm.cu (kernels/cpu/rmsnorm.h's arithmetic: fp32, one rounding)
template <typename E>
void rmsnorm_forward(E* out, float* rstd, const E* inp, const E* weight,  // (N,C) (N) (N,C) (C)
                     int N, int C, float eps, cudaStream_t s);
template <typename E>
void rmsnorm_backward(E* dinp, E* dweight, const E* dout, const E* inp, const E* weight,  // accumulate
                      const float* rstd, int N, int C,
                      float* partials,  // column_partials_floats(N, C)
                      cudaStream_t s);

// --- rope.cu (kernels/cpu/rope.h: half-split pairs, in place on the q and k heads)
// The inverse frequencies, made on the host by rope_inv_freq (kernels/cpu/rope.h) so every
// backend rotates by the same fp32 angles, and passed by value: no upload.
constexpr int kRopeMaxHalf = 128;  // head size up to 256
struct RopeFreqs {
  float inv_freq[kRopeMaxHalf];
};
template <typename E>
void rope(E* qkv,  // (B, T, (NH + 2*NKV)*hs)
          int B, int T, int NH, int NKV, int hs, int pos0, const RopeFreqs& freqs, bool backward, cudaStream_t s);

// --- swiglu.cu
template <typename E>
void swiglu_forward(E* out, const E* gate_up, int N, int H, cudaStream_t s);  // (N,H) (N,2H)
template <typename E>
void swiglu_backward(E* dgate_up, const E* dout, const E* gate_up, int N, int H, cudaStream_t s);  // (N,2H) assigned

// --- attention_kv.cu (sampling: new positions against a KV cache; legend of
// kernels/cpu/attention_kv.h: Tq new positions, Tc cache rows, NKV key/value heads)
int attention_kv_max_head_size();  // hs above this is refused
template <typename E>
void attention_forward_kv(E* out, const E* q,                 // (B, Tq, NH*hs) each
                          const E* k_cache, const E* v_cache,  // (B, Tc, NKV*hs) each
                          int B, int Tq, int pos, int Tc, int NH, int NKV, int hs, cudaStream_t s);

// --- gelu.cu, residual.cu
template <typename E>
void gelu_forward(E* out, const E* inp, size_t n, cudaStream_t s);
template <typename E>
void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n, cudaStream_t s);
template <typename E>
void residual_forward(E* out, const E* a, const E* b, size_t n, cudaStream_t s);

// --- crossentropy.cu
template <typename E>
void crossentropy_forward(float* losses, float* lse, const E* logits, const int* targets,
                          int N, int V, int Vp, cudaStream_t s);
template <typename E>
void crossentropy_softmax_backward(E* logits_to_dlogits, const float* lse, const int* targets, float dloss,
                                   int N, int V, int Vp, cudaStream_t s);

// --- convert.cu
void f32_to_bf16(bf16_t* out, const float* in, size_t n, cudaStream_t s);
void bf16_to_f32(float* out, const bf16_t* in, size_t n, cudaStream_t s);
// dst = (assign ? 0 : dst) + src in fp32; S float or bf16_t.
template <typename S>
void accumulate_f32(float* dst, const S* src, size_t n, bool assign, cudaStream_t s);
// dst = round_bf16((assign ? 0 : dst) + src), added in fp32.
void accumulate_bf16(bf16_t* dst, const bf16_t* src, size_t n, bool assign, cudaStream_t s);

// --- norm.cu: sum of squares in fixed chunks of kSumChunk elements, one fp64 partial per
// chunk (partials has sum_squares_chunks(n) entries); the caller adds them in order.
constexpr size_t kSumChunk = size_t(1) << 16;
inline size_t sum_squares_chunks(size_t n) { return (n + kSumChunk - 1) / kSumChunk; }
template <typename S>
void sum_squares_partials(double* partials, const S* x, size_t n, cudaStream_t s);

// --- adamw.cu: kernels/cpu/adamw.h's update. P float or bf16_t params (may be null when
// master is given); master null only when P is float (params are their own master);
// G float or bf16_t gradients.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias1, bias2;  // 1 - beta^t, computed on the host as the CPU does
};
// Weight decay by span, for one launch over several tensors: element i (counted from the
// launch's first) lies in the first span k with i < end[k] and decays when bit k of
// decay_mask is set. count 0: weight_decay applies to every element. Passed by value as a
// kernel parameter, so a launch needs no device table and no upload.
constexpr int kAdamWMaxSpans = 64;
struct AdamWSpans {
  int count = 0;
  unsigned long long decay_mask = 0;
  size_t end[kAdamWMaxSpans];  // increasing; end[count - 1] = n
};
template <typename P, typename G>
void adamw_update(P* params, float* master, float* m, float* v, const G* grads, size_t n,
                  const AdamWArgs& a, const AdamWSpans& spans, cudaStream_t s);

}  // namespace rz::cuda
