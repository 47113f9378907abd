// kernels/cpu/matmul.h: the linear layers, out = inp @ weight^T + bias, as GEMMs (fp32:
// gemm_f32.h on AVX2 CPUs, else Eigen; RINGZERO_FP32_GEMM=eigen forces Eigen).
// Legend: N rows (= B*T), C input channels, OC output channels. Weights are (OC, C)
// row-major as in llm.c and PyTorch's nn.Linear. E storage type (convert.h).
#pragma once

namespace rz {

// out = inp @ weight^T + bias (bias may be null). out is assigned.
template <typename E>
void matmul_forward(E* out,           // (N, OC)
                    const E* inp,     // (N, C)
                    const E* weight,  // (OC, C)
                    const E* bias,    // (OC) or null
                    int N, int C, int OC);

// dinp += dout @ weight;  dweight += dout^T @ inp;  dbias += sum_n dout  (all accumulate;
// dinp and dbias may be null).
template <typename E>
void matmul_backward(E* dinp,           // (N, C)
                     E* dweight,        // (OC, C)
                     E* dbias,          // (OC) or null
                     const E* dout,     // (N, OC)
                     const E* inp,      // (N, C)
                     const E* weight,   // (OC, C)
                     int N, int C, int OC);

}  // namespace rz
