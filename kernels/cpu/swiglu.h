// kernels/cpu/swiglu.h: the gated MLP's activation (SwiGLU, Llama's MLP).
// Legend: N rows (= B*T), H the intermediate size. E storage type (convert.h).
//
// gate_up (N, 2H) is one fused matmul's output: per row the gate (H) then the up
// projection (H). out = silu(gate) * up with silu(x) = x sigmoid(x) = x / (1 + exp(-x)),
// computed in the compute type and rounded once (transformers rounds silu(gate) to bf16
// before the product in bf16 mode; the two differ by about one bf16 rounding).
#pragma once

namespace rz {

template <typename E>
void swiglu_forward(E* out,            // (N, H), assigned
                    const E* gate_up,  // (N, 2H)
                    int N, int H);

// With s = sigmoid(gate): dgate = dout * up * s (1 + gate (1 - s)), dup = dout * silu(gate).
// dgate_up is assigned (the fused matmul's output gradient), gate and up halves as in gate_up.
template <typename E>
void swiglu_backward(E* dgate_up,       // (N, 2H), assigned
                     const E* dout,     // (N, H)
                     const E* gate_up,  // (N, 2H)
                     int N, int H);

}  // namespace rz
