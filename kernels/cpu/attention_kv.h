// kernels/cpu/attention_kv.h: attention of a few new positions against a KV cache, for
// sampling (no backward). Legend: B sequences, Tq new positions per sequence, Tc cache
// rows per sequence, NH query heads, NKV key/value heads, hs head size.
//
// Why K and V live in caches of their own, (B, Tc, NKV*hs) each, and not as rows of the
// fused qkv tensor: the model writes a new position's k and v straight into its cache row
// (the k and v thirds of the qkv weight are matmuls of their own, model/gpt2.cpp), so no
// copy op is needed, the cache holds no q, and a model with fewer key/value heads than
// query heads (grouped-query attention: query head h reads kv head h / (NH / NKV)) needs
// no other layout. GPT-2 has NKV = NH.
#pragma once

namespace rz {

// Query i of sequence b sits at position pos + i and attends to cache rows 0 .. pos + i
// (causal), which the caller has filled (rows 0 .. pos + Tq - 1):
//   out[b,i,h] = sum_{j <= pos+i} softmax_j(q[b,i,h] . k[b,j,kv] / sqrt(hs)) v[b,j,kv].
// Computed in fp32 (bf16 loaded and rounded once on store), each (b, i, h) row on its own:
// the result does not depend on the thread count. out is assigned.
template <typename E>
void attention_forward_kv(E* out,            // (B, Tq, NH*hs)
                          const E* q,        // (B, Tq, NH*hs)
                          const E* k_cache,  // (B, Tc, NKV*hs)
                          const E* v_cache,  // (B, Tc, NKV*hs)
                          int B, int Tq, int pos, int Tc, int NH, int NKV, int hs);

// The shape rules every backend's attention_forward_kv enforces (one line naming the
// argument): positive sizes, NKV dividing NH, 0 <= pos and pos + Tq <= Tc.
void check_attention_kv_shape(int B, int Tq, int pos, int Tc, int NH, int NKV, int hs);

}  // namespace rz
