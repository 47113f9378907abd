// kernels/cpu/attention.h: causal multi-head self-attention over a fused qkv tensor.
// Legend: B batch, T time, C channels, NH heads, hs = C / NH head size.
// qkv[b,t,:] holds q (C), k (C), v (C); head h uses columns h*hs .. (h+1)*hs of each.
#pragma once

namespace rz {

// att[b,h,t,t2] = softmax_{t2<=t}(q_t . k_t2 / sqrt(hs)) (zero for t2 > t);
// out[b,t,h*hs+i] = sum_t2 att[b,h,t,t2] v_t2[i].
template <typename E>
void attention_forward(E* out,        // (B, T, C)
                       E* att,        // (B, NH, T, T) saved for backward
                       const E* qkv,  // (B, T, 3C)
                       int B, int T, int C, int NH);

// dqkv += gradient of out w.r.t. qkv (accumulates).
template <typename E>
void attention_backward(E* dqkv,        // (B, T, 3C)
                        const E* dout,  // (B, T, C)
                        const E* qkv,   // (B, T, 3C)
                        const E* att,   // (B, NH, T, T)
                        int B, int T, int C, int NH);

// Flash-style twins: the same products in the same row blocks, but only a (32, T) block
// of probabilities exists at a time. lse[b,h,t] = log sum_{t2<=t} exp(q_t . k_t2 / sqrt(hs)).
// out is bitwise what attention_forward writes; the backward recomputes each probability
// as exp(score - lse), which differs from the saved one by rounding only.
template <typename E>
void attention_forward_flash(E* out,        // (B, T, C)
                             float* lse,    // (B, NH, T)
                             const E* qkv,  // (B, T, 3C)
                             int B, int T, int C, int NH);
template <typename E>
void attention_backward_flash(E* dqkv,           // (B, T, 3C), accumulates
                              const E* dout,     // (B, T, C)
                              const E* qkv,      // (B, T, 3C)
                              const float* lse,  // (B, NH, T)
                              int B, int T, int C, int NH);

}  // namespace rz
