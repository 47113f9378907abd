// kernels/cuda/crossentropy.cu: softmax + cross-entropy (twin of
// kernels/cpu/crossentropy.cpp). One block per row of logits (N rows, Vp padded vocab,
// the first V real). The backward is fused with the classifier the way llm.c's
// fused_classifier is: it overwrites the logits in place with dlogits, recomputing the
// softmax from the saved log-sum-exp, so no probability tensor (N, Vp) ever exists.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

constexpr int kRowThreads = 512;

// losses, lse (N); logits (N, Vp); targets (N)
template <typename E>
__global__ void crossentropy_forward_kernel(float* losses, float* lse, const E* logits, const int* targets, int V,
                                            int Vp) {
  __shared__ float scratch[32];
  const int n = blockIdx.x;
  const E* x = logits + size_t(n) * Vp;
  float maxv = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, load(x[v]));
  maxv = block_max(maxv, scratch);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(load(x[v]) - maxv);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const float l = maxv + logf(sum);
    lse[n] = l;
    losses[n] = l - load(x[targets[n]]);
  }
}

// logits (N, Vp) in place -> (softmax - onehot) * dloss, 0 in columns V..Vp-1
template <typename E>
__global__ void crossentropy_softmax_backward_kernel(E* logits, const float* lse, const int* targets, float dloss,
                                                     int V, int Vp) {
  const int n = blockIdx.x;
  E* x = logits + size_t(n) * Vp;
  const float l = lse[n];
  const int y = targets[n];
  for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
    float d = 0.0f;
    if (v < V) d = (expf(load(x[v]) - l) - (v == y ? 1.0f : 0.0f)) * dloss;
    x[v] = store<E>(d);
  }
}

}  // namespace

template <typename E>
void crossentropy_forward(float* losses, float* lse, const E* logits, const int* targets, int N, int V, int Vp,
                          cudaStream_t s) {
  if (N == 0) return;
  crossentropy_forward_kernel<E><<<unsigned(N), kRowThreads, 0, s>>>(losses, lse, logits, targets, V, Vp);
  CUDA_CHECK_LAUNCH("crossentropy_forward_kernel", s);
}

template <typename E>
void crossentropy_softmax_backward(E* logits, const float* lse, const int* targets, float dloss, int N, int V, int Vp,
                                   cudaStream_t s) {
  if (N == 0) return;
  crossentropy_softmax_backward_kernel<E><<<unsigned(N), kRowThreads, 0, s>>>(logits, lse, targets, dloss, V, Vp);
  CUDA_CHECK_LAUNCH("crossentropy_softmax_backward_kernel", s);
}

#define RZ_INSTANTIATE(E)                                                                                        \
  template void crossentropy_forward<E>(float*, float*, const E*, const int*, int, int, int, cudaStream_t);      \
  template void crossentropy_softmax_backward<E>(E*, const float*, const int*, float, int, int, int, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
