// kernels/backend.h: the op table. One interface, the same names and argument order on
// every backend; the model (model/gpt2.cpp) and the strategies (zero/) call it and never
// name a backend's kernels.
//
// Why a table and not a branch: a backend is "where the numbers live and who computes on
// them". The CPU backend (kernels/cpu/cpu_backend.cpp) forwards each op to the templated
// CPU kernels in kernels/cpu/*.h, which stay the reference; the CUDA backend
// (kernels/cuda/cuda_backend.cu) launches its kernels on one compute stream; the simulated
// device (kernels/sim, `--device sim`, for tests) checks every pointer against a guarded
// arena and forwards to the CPU backend. Adding a backend is writing one more table; tests/test_backend_ops.cpp then holds every op of it
// against the CPU backend (ggml's test-backend-ops is the model).
//
// Conventions, for every op:
//   - Pointer arguments point into the backend's memory (Buffers allocated on device()),
//     except where a comment says "host". Shapes are in the comments (legend: B batch,
//     T time, C channels, OC output channels, NH (query) heads, NKV key/value heads
//     (NH % NKV == 0; G = NH / NKV query heads share one; query head h reads kv head
//     h / G), hs head size, N rows = B*T, V vocab, Vp padded vocab, H the gated MLP's
//     intermediate size). Argument order is the CPU kernels' order: outputs first.
//   - Ops are queued in call order. On the CPU they run before the call returns; on a GPU
//     they are asynchronous on the backend's compute stream, and only the ops that return
//     a host value (sum_squares) or write host memory (copy_to_host) wait.
//   - "accumulates" (+=) and "assigns" (=) are as in the CPU kernel's header.
//
// The model's ops come in two storage types E, float (fp32 mode) and bf16 (bf16 mode):
// Ops<E> is that table, and backend.ops<E>() picks it. Per-row statistics (layernorm mean
// and rstd, losses, lse) are fp32 in both. Optimizer and conversion ops mix types, so
// they are overloads on Backend itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/bf16.h"
#include "base/memory.h"
#include "base/trace.h"
#include "kernels/adamw_step.h"  // AdamWStep: the step description every backend takes

// What --help says of the GPU code's status (the CUDA backend, the ring's cuda transport,
// nccl; docs/cuda.md, docs/gpu-comm.md), written once so that it changes in one place. A
// macro, so that it joins the string literals of the settings table's help. The kernels,
// the backend's host logic and the cuda transport run in every CI run on the CUDA-on-CPU
// emulator (tests/cuemu); nothing has run on a GPU, and NCCL has not run at all.
#define RZ_GPU_STATUS "never run on a GPU yet; CI runs the CUDA code on a CPU emulator, NCCL not at all"

namespace rz {

template <typename E>
class Ops {
 public:
  virtual ~Ops() = default;

  // out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
  virtual void encoder_forward(E* out,          // (B, T, C)
                               const int* inp,  // (B, T) token ids in [0, Vp)
                               const E* wte,    // (Vp, C)
                               const E* wpe,    // (maxT, C)
                               int B, int T, int C) = 0;
  // dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]. Deterministic: the same
  // inputs give the same bits (no atomics in the order of arrival). The token ids are the
  // host's copy (the caller has them): a GPU groups positions by token on the host without
  // reading them back from the device.
  virtual void encoder_backward(E* dwte,              // (Vp, C) accumulated
                                E* dwpe,              // (maxT, C) accumulated
                                const E* dout,        // (B, T, C)
                                const int* host_inp,  // (B, T) host
                                int B, int T, int C) = 0;

  // out = (inp - mean) * rstd * weight + bias per row; mean and rstd saved for backward.
  virtual void layernorm_forward(E* out, float* mean, float* rstd,  // (N, C), (N), (N)
                                 const E* inp, const E* weight, const E* bias,  // (N, C), (C), (C)
                                 int N, int C) = 0;
  // dinp, dweight, dbias accumulate.
  virtual void layernorm_backward(E* dinp, E* dweight, E* dbias,  // (N, C), (C), (C)
                                  const E* dout, const E* inp, const E* weight,  // (N, C), (N, C), (C)
                                  const float* mean, const float* rstd,  // (N), (N)
                                  int N, int C) = 0;

  // out = inp @ weight^T + bias (bias may be null); out is assigned.
  virtual void matmul_forward(E* out,           // (N, OC)
                              const E* inp,     // (N, C)
                              const E* weight,  // (OC, C) row-major, as nn.Linear
                              const E* bias,    // (OC) or null
                              int N, int C, int OC) = 0;
  // dinp += dout @ weight; dweight += dout^T @ inp; dbias += sum_n dout (dinp and dbias may
  // be null). Deterministic (the bias sum has a fixed order).
  virtual void matmul_backward(E* dinp,          // (N, C)
                               E* dweight,       // (OC, C)
                               E* dbias,         // (OC) or null
                               const E* dout,    // (N, OC)
                               const E* inp,     // (N, C)
                               const E* weight,  // (OC, C)
                               int N, int C, int OC) = 0;

  // Causal self-attention over fused qkv, grouped-query: each row of qkv holds q (C =
  // NH*hs), then k (NKV*hs), then v (NKV*hs), hs = C/NH; query head h uses q columns
  // h*hs .. (h+1)*hs and reads kv head h / (NH/NKV) (no copy of k and v per query head).
  // NKV = NH is GPT-2's layout, (B, T, 3C). att keeps the softmax for backward.
  virtual void attention_forward(E* out,        // (B, T, C)
                                 E* att,        // (B, NH, T, T)
                                 const E* qkv,  // (B, T, C + 2*NKV*hs)
                                 int B, int T, int C, int NH, int NKV) = 0;
  // dqkv accumulates (its k and v parts sum over the query heads of their group).
  virtual void attention_backward(E* dqkv,        // (B, T, C + 2*NKV*hs)
                                  const E* dout,  // (B, T, C)
                                  const E* qkv,   // (B, T, C + 2*NKV*hs)
                                  const E* att,   // (B, NH, T, T)
                                  int B, int T, int C, int NH, int NKV) = 0;

  // The same attention, flash-style: never forms the (T, T) matrix. The forward saves the
  // log-sum-exp of each row's scaled scores instead of the probabilities; the backward
  // recomputes them from it, a row block (CPU) or one row (GPU) at a time. Memory per
  // layer: (B, NH, T) floats instead of (B, NH, T, T) of E. dqkv accumulates.
  virtual void attention_forward_flash(E* out,        // (B, T, C)
                                       float* lse,    // (B, NH, T) saved for backward
                                       const E* qkv,  // (B, T, C + 2*NKV*hs)
                                       int B, int T, int C, int NH, int NKV) = 0;
  virtual void attention_backward_flash(E* dqkv,           // (B, T, C + 2*NKV*hs)
                                        const E* dout,     // (B, T, C)
                                        const E* qkv,      // (B, T, C + 2*NKV*hs)
                                        const float* lse,  // (B, NH, T)
                                        int B, int T, int C, int NH, int NKV) = 0;

  // Sampling with a KV cache (no backward; kernels/cpu/attention_kv.h says why K and V
  // have caches of their own): Tq new positions of each sequence attend to the cache.
  // Query i sits at position pos + i and sees cache rows 0 .. pos + i, already written
  // (the model's k and v matmuls write them). Query head h reads kv head h / (NH / NKV);
  // GPT-2 has NKV = NH. Tc: the cache's rows per sequence. out is assigned.
  virtual void attention_forward_kv(E* out,            // (B, Tq, NH*hs)
                                    const E* q,        // (B, Tq, NH*hs)
                                    const E* k_cache,  // (B, Tc, NKV*hs)
                                    const E* v_cache,  // (B, Tc, NKV*hs)
                                    int B, int Tq, int pos, int Tc, int NH, int NKV, int hs) = 0;

  // RMSNorm (Llama): out = inp * rstd[n] * weight, rstd[n] = 1 / sqrt(mean_c(inp^2) + eps),
  // saved for backward. Computed in fp32 and rounded once (Hugging Face's LlamaRMSNorm
  // rounds the normalised value to bf16 before the weight multiplies it, a second rounding;
  // kernels/cpu/rmsnorm.h). out is assigned.
  virtual void rmsnorm_forward(E* out,           // (N, C)
                               float* rstd,      // (N) saved for backward
                               const E* inp,     // (N, C)
                               const E* weight,  // (C)
                               int N, int C, float eps) = 0;
  // dinp and dweight accumulate; dweight's column sums have a fixed order (no atomics).
  virtual void rmsnorm_backward(E* dinp,           // (N, C)
                                E* dweight,        // (C)
                                const E* dout,     // (N, C)
                                const E* inp,      // (N, C)
                                const E* weight,   // (C)
                                const float* rstd,  // (N)
                                int N, int C) = 0;

  // Rotary position embedding, in place on the q part (NH*hs) and the k part (NKV*hs) of
  // each row of qkv; the v part is untouched. Half-split form (Hugging Face's rotate_half):
  // within a head, dimensions i and i + hs/2 (i < hs/2) are rotated by the angle
  // (pos0 + t) * inv_freq[i], inv_freq[i] = 1 / theta^(2i/hs) in fp32. hs even. pos0: the
  // position of row t = 0 (the KV-cache decode rotates positions past 0).
  virtual void rope_forward(E* qkv,  // (B, T, (NH + 2*NKV)*hs)
                            int B, int T, int NH, int NKV, int hs, int pos0, float theta) = 0;
  // In place: the transposed rotation (angle negated) of a gradient's q and k parts.
  virtual void rope_backward(E* dqkv,  // (B, T, (NH + 2*NKV)*hs)
                             int B, int T, int NH, int NKV, int hs, int pos0, float theta) = 0;

  // SwiGLU: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)); each row of gate_up holds
  // [gate (H) | up (H)] (one fused matmul with a (2H, C) weight makes it). out is assigned.
  virtual void swiglu_forward(E* out,            // (N, H)
                              const E* gate_up,  // (N, 2H)
                              int N, int H) = 0;
  // dgate_up is assigned (the fused matmul's output gradient).
  virtual void swiglu_backward(E* dgate_up,        // (N, 2H)
                               const E* dout,      // (N, H)
                               const E* gate_up,   // (N, 2H)
                               int N, int H) = 0;

  // GELU, tanh approximation. out may alias inp; dinp is assigned and may alias dout.
  virtual void gelu_forward(E* out, const E* inp, size_t n) = 0;
  virtual void gelu_backward(E* dinp, const E* inp, const E* dout, size_t n) = 0;

  // out = a + b (n); out may alias either.
  virtual void residual_forward(E* out, const E* a, const E* b, size_t n) = 0;

  // losses[n] = lse[n] - logits[n, targets[n]] over the first V columns.
  virtual void crossentropy_forward(float* losses,      // (N)
                                    float* lse,         // (N) saved for backward
                                    const E* logits,    // (N, Vp)
                                    const int* targets, // (N)
                                    int N, int V, int Vp) = 0;
  // In place, fused with the classifier: logits <- (softmax - onehot) * dloss for v < V,
  // 0 in the padded columns. No probability tensor is ever stored.
  virtual void crossentropy_softmax_backward(E* logits_to_dlogits,  // (N, Vp)
                                             const float* lse,      // (N)
                                             const int* targets,    // (N)
                                             float dloss, int N, int V, int Vp) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu (N OpenMP threads)", "cuda:0 (NVIDIA H200)"
  // The driver's view of this device's memory (cudaMemGetInfo: bytes in use by every
  // process and the total), for the memory report next to the tracker's figures. False
  // where there is no such figure (the host).
  virtual bool driver_memory(size_t* used, size_t* total) {
    (void)used;
    (void)total;
    return false;
  }

  // Stamps on this backend's compute stream for `--trace` (base/trace.h DeviceClock), so a
  // GPU rank's spans are device time. Null where ops finish before they return (the host).
  virtual trace::DeviceClock* trace_clock() { return nullptr; }

  template <typename E>
  Ops<E>& ops();

  // --- memory: bytes; dst/src in this backend's memory unless named "host".
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;  // waits
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // may not overlap
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void synchronize() = 0;  // wait for every queued op

  // --- streams: ordering between a GPU's streams without a host wait (a stream-form
  // OnDone, comm/communicator.h). On the CPU every op has finished when it returns, so
  // these do nothing and marks are null.
  // While a StreamScope for a non-null stream (a device stream of this backend's GPU, e.g.
  // a communicator's comm stream) lives, the copy, zero, accumulate_* and f32_to_bf16 calls
  // this thread makes on this backend are queued on that stream instead of the compute
  // stream (f32_to_bf16: zero/wide_reduce.h narrows an fp32 reduction there). Only those:
  // the other ops share the compute stream's scratch memory.
  class StreamScope {
   public:
    StreamScope(Backend& be, void* stream) : be_(be), prev_(be.set_thread_stream(stream)) {}
    ~StreamScope() { be_.set_thread_stream(prev_); }
    StreamScope(const StreamScope&) = delete;
    StreamScope& operator=(const StreamScope&) = delete;

   private:
    Backend& be_;
    void* prev_;
  };
  // A point after the work queued so far on `stream` (null: the compute stream).
  virtual std::shared_ptr<void> mark(void* stream) {
    (void)stream;
    return nullptr;
  }
  // Work queued on the compute stream from now on waits for the mark (null: nothing).
  virtual void wait_for(const std::shared_ptr<void>& mark) { (void)mark; }

  // --- conversions (CPU argument order: out, in). out may not alias in.
  virtual void f32_to_bf16(bf16* out, const float* in, size_t n) = 0;  // round to nearest even
  virtual void bf16_to_f32(float* out, const bf16* in, size_t n) = 0;  // exact

  // --- gradient shards and clipping
  // dst = (assign ? 0 : dst) + src, in fp32: folds a reduced gradient shard into the fp32
  // owned gradient (zero2). dst (n) fp32, src (n).
  virtual void accumulate_f32(float* dst, const float* src, size_t n, bool assign) = 0;
  virtual void accumulate_f32(float* dst, const bf16* src, size_t n, bool assign) = 0;
  // dst = round_bf16((assign ? 0 : dst) + src), added in fp32: the owned gradient kept in
  // bf16 (zero2's default in bf16 mode). dst, src (n) bf16.
  virtual void accumulate_bf16(bf16* dst, const bf16* src, size_t n, bool assign) = 0;
  // Sum of squares in fp64, bitwise reproducible for the same (x, n) on one backend
  // (fixed blocks, fixed order, independent of thread count); returns to the host.
  virtual double sum_squares(const float* x, size_t n) = 0;
  virtual double sum_squares(const bf16* x, size_t n) = 0;

  // --- AdamW (kernels/cpu/adamw.h has the formula). The three storage cases:
  // fp32 params are their own master (master null); bf16 params keep an fp32 master and
  // take bf16 or fp32 gradients. params, master, m, v, grads: (n) each.
  virtual void adamw_update(float* params, float* master, float* m, float* v, const float* grads,
                            size_t n, const AdamWStep& s) = 0;
  virtual void adamw_update(bf16* params, float* master, float* m, float* v, const bf16* grads,
                            size_t n, const AdamWStep& s) = 0;
  virtual void adamw_update(bf16* params, float* master, float* m, float* v, const float* grads,
                            size_t n, const AdamWStep& s) = 0;

 protected:
  // StreamScope's hook: makes `stream` this thread's stream for the ops named there and
  // returns the previous one.
  virtual void* set_thread_stream(void* stream) {
    (void)stream;
    return nullptr;
  }
  Backend(std::unique_ptr<Ops<float>> f32, std::unique_ptr<Ops<bf16>> b16)
      : f32_(std::move(f32)), bf16_(std::move(b16)) {}

 private:
  std::unique_ptr<Ops<float>> f32_;
  std::unique_ptr<Ops<bf16>> bf16_;
};

template <>
inline Ops<float>& Backend::ops<float>() { return *f32_; }
template <>
inline Ops<bf16>& Backend::ops<bf16>() { return *bf16_; }

// The backend for a device is kernels/registry/device_registry.h's make_backend (one row per
// device kind); above kernels/ only train/rank_setup.h's place_rank calls it. The process's
// shared CPU backend for host compute is kernels/cpu/cpu_backend.h's cpu_backend().

}  // namespace rz
