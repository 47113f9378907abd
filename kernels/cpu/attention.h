// kernels/cpu/attention.h: causal grouped-query self-attention over a fused qkv tensor.
// Legend: B batch, T time, C channels (= NH*hs, the query width), NH query heads, NKV
// key/value heads (NH % NKV == 0; G = NH / NKV), hs = C / NH head size.
// qkv[b,t,:] holds q (C), then k (NKV*hs), then v (NKV*hs): query head h uses q columns
// h*hs .. (h+1)*hs and reads kv head h / G, columns (h/G)*hs .. of k and of v. NKV = NH is
// multi-head attention (GPT-2's (B, T, 3C)), NKV = 1 multi-query. No copy of k and v is
// made per query head.
#pragma once

namespace rz {

// att[b,h,t,t2] = softmax_{t2<=t}(q_t . k_t2 / sqrt(hs)) (zero for t2 > t);
// out[b,t,h*hs+i] = sum_t2 att[b,h,t,t2] v_t2[i]   (k and v of kv head h / G).
template <typename E>
void attention_forward(E* out,        // (B, T, C)
                       E* att,        // (B, NH, T, T) saved for backward
                       const E* qkv,  // (B, T, C + 2*NKV*hs)
                       int B, int T, int C, int NH, int NKV);

// dqkv += gradient of out w.r.t. qkv (accumulates; a kv head's gradient sums over the G
// query heads that read it).
template <typename E>
void attention_backward(E* dqkv,        // (B, T, C + 2*NKV*hs)
                        const E* dout,  // (B, T, C)
                        const E* qkv,   // (B, T, C + 2*NKV*hs)
                        const E* att,   // (B, NH, T, T)
                        int B, int T, int C, int NH, int NKV);

// Flash-style twins: the same products in the same row blocks, but only a (32, T) block
// of probabilities exists at a time. lse[b,h,t] = log sum_{t2<=t} exp(q_t . k_t2 / sqrt(hs)).
// out is bitwise what attention_forward writes; the backward recomputes each probability
// as exp(score - lse), which differs from the saved one by rounding only.
template <typename E>
void attention_forward_flash(E* out,        // (B, T, C)
                             float* lse,    // (B, NH, T)
                             const E* qkv,  // (B, T, C + 2*NKV*hs)
                             int B, int T, int C, int NH, int NKV);
template <typename E>
void attention_backward_flash(E* dqkv,           // (B, T, C + 2*NKV*hs), accumulates
                              const E* dout,     // (B, T, C)
                              const E* qkv,      // (B, T, C + 2*NKV*hs)
                              const float* lse,  // (B, NH, T)
                              int B, int T, int C, int NH, int NKV);

// The shape rules every backend's four attention ops enforce (one line naming the op):
// B, T >= 0, NH >= 1 dividing C, 1 <= NKV dividing NH.
void check_attention_shape(const char* op, int B, int T, int C, int NH, int NKV);

}  // namespace rz
