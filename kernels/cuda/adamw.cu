// kernels/cuda/adamw.cu: one AdamW step (twin of kernels/cpu/adamw.cpp, llm.c's update with
// decoupled weight decay), one thread per element, grid-stride, one launch for many
// tensors (a bucket; weight decay per span of tensors, AdamWSpans). Mixed precision: the fp32
// master weights, m and v are updated and the bf16 parameters receive the new master value,
// rounded to nearest even, in the same pass. In fp32 mode the parameters are their own
// master (master == nullptr).
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

// The weight decay of element i: a binary search over at most kAdamWMaxSpans span ends.
__device__ __forceinline__ float decay_of(const AdamWSpans& sp, size_t i, float weight_decay) {
  if (sp.count == 0) return weight_decay;
  int lo = 0, hi = sp.count - 1;  // the first k with i < end[k]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (i < sp.end[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  return (sp.decay_mask >> lo) & 1ull ? weight_decay : 0.0f;
}

// params (n) P or null; master, m, v (n) fp32 (master null: params are the master);
// grads (n) G
template <typename P, typename G>
__global__ void adamw_kernel(P* params, float* master, float* m, float* v, const G* grads, size_t n, AdamWArgs a,
                             AdamWSpans sp) {
  RZ_GRID_STRIDE(i, n) {
    const float wd = decay_of(sp, i, a.weight_decay);
    const float g = load(grads[i]) * a.grad_scale;
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float w = master != nullptr ? master[i] : load(params[i]);
    w -= a.lr * ((mi / a.bias1) / (sqrtf(vi / a.bias2) + a.eps) + wd * w);
    if (master != nullptr) master[i] = w;
    if (params != nullptr) params[i] = store<P>(w);
  }
}

}  // namespace

template <typename P, typename G>
void adamw_update(P* params, float* master, float* m, float* v, const G* grads, size_t n, const AdamWArgs& a,
                  const AdamWSpans& spans, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<P, G><<<grid_for(n), kThreads, 0, s>>>(params, master, m, v, grads, n, a, spans);
  CUDA_CHECK_LAUNCH("adamw_kernel", s);
}

template void adamw_update<float, float>(float*, float*, float*, float*, const float*, size_t, const AdamWArgs&,
                                         const AdamWSpans&, cudaStream_t);
template void adamw_update<bf16_t, bf16_t>(bf16_t*, float*, float*, float*, const bf16_t*, size_t, const AdamWArgs&,
                                           const AdamWSpans&, cudaStream_t);
template void adamw_update<bf16_t, float>(bf16_t*, float*, float*, float*, const float*, size_t, const AdamWArgs&,
                                          const AdamWSpans&, cudaStream_t);

}  // namespace rz::cuda
