// kernels/cuda/encoder.cu: token + position embedding on the GPU (twin of
// kernels/cpu/encoder.cpp). The backward never adds with atomics: a token may repeat in a
// batch, so the host groups positions by token (CudaBackend does, llm.c's way) and one
// block column owns each token's row of dwte, adding its positions in index order. In fp32
// that is the CPU's order of additions, so dwte and dwpe match it bit for bit; in bf16 the
// sum is kept in fp32 and rounded once.
#include "kernels/cuda/launchers.cuh"

namespace rz::cuda {

namespace {

// out (B,T,C); inp (B,T); wte (Vp,C); wpe (maxT,C)
template <typename E>
__global__ void encoder_forward_kernel(E* out, const int* inp, const E* wte, const E* wpe, int T, int C,
                                       size_t n) {
  RZ_GRID_STRIDE(i, n) {
    const size_t bt = i / C;
    const int c = int(i % C), t = int(bt % T);
    out[i] = store<E>(load(wte[size_t(inp[bt]) * C + c]) + load(wpe[size_t(t) * C + c]));
  }
}

// dwpe (maxT,C); dout (B,T,C): one thread per (t, c), b in order.
template <typename E>
__global__ void encoder_backward_wpe_kernel(E* dwpe, const E* dout, int B, int T, int C) {
  RZ_GRID_STRIDE(i, size_t(T) * C) {
    float acc = load(dwpe[i]);
    for (int b = 0; b < B; ++b) acc += load(dout[size_t(b) * T * C + i]);
    dwpe[i] = store<E>(acc);
  }
}

// grid (nbuckets, ceil(C / blockDim)): block (k, y) owns columns y*blockDim.. of token k's row.
template <typename E>
__global__ void encoder_backward_wte_kernel(E* dwte, const E* dout, const int* bucket_token,
                                            const int* bucket_start, const int* positions, int C) {
  const int k = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  E* row = dwte + size_t(bucket_token[k]) * C;
  float acc = load(row[c]);
  for (int j = bucket_start[k]; j < bucket_start[k + 1]; ++j) acc += load(dout[size_t(positions[j]) * C + c]);
  row[c] = store<E>(acc);
}

}  // namespace

template <typename E>
void encoder_forward(E* out, const int* inp, const E* wte, const E* wpe, int B, int T, int C, cudaStream_t s) {
  const size_t n = size_t(B) * T * C;
  if (n == 0) return;
  encoder_forward_kernel<E><<<grid_for(n), kThreads, 0, s>>>(out, inp, wte, wpe, T, C, n);
  CUDA_CHECK_LAUNCH("encoder_forward_kernel", s);
}

template <typename E>
void encoder_backward_wpe(E* dwpe, const E* dout, int B, int T, int C, cudaStream_t s) {
  const size_t n = size_t(T) * C;
  if (n == 0) return;
  encoder_backward_wpe_kernel<E><<<grid_for(n), kThreads, 0, s>>>(dwpe, dout, B, T, C);
  CUDA_CHECK_LAUNCH("encoder_backward_wpe_kernel", s);
}

template <typename E>
void encoder_backward_wte(E* dwte, const E* dout, const int* bucket_token, const int* bucket_start,
                          const int* positions, int nbuckets, int C, cudaStream_t s) {
  if (nbuckets == 0 || C == 0) return;
  constexpr int kCols = 128;
  dim3 grid(unsigned(nbuckets), unsigned((C + kCols - 1) / kCols));
  encoder_backward_wte_kernel<E><<<grid, kCols, 0, s>>>(dwte, dout, bucket_token, bucket_start, positions, C);
  CUDA_CHECK_LAUNCH("encoder_backward_wte_kernel", s);
}

#define RZ_INSTANTIATE(E)                                                                             \
  template void encoder_forward<E>(E*, const int*, const E*, const E*, int, int, int, cudaStream_t); \
  template void encoder_backward_wpe<E>(E*, const E*, int, int, int, cudaStream_t);                 \
  template void encoder_backward_wte<E>(E*, const E*, const int*, const int*, const int*, int, int, cudaStream_t);
RZ_INSTANTIATE(float)
RZ_INSTANTIATE(bf16_t)

}  // namespace rz::cuda
