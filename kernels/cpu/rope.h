// kernels/cpu/rope.h: rotary position embedding (RoPE), Hugging Face's half-split form.
// Legend: B batch, T time, NH query heads, NKV key/value heads, hs head size (even).
//
// Each row of qkv (B, T, (NH + 2*NKV)*hs) holds NH query heads, then NKV key heads, then
// NKV value heads, hs columns each. The first NH + NKV heads of a row are rotated in
// place; v is untouched. Within a head, dimension i < hs/2 pairs with i + hs/2 (Hugging
// Face's rotate_half, not the interleaved (2i, 2i+1) pairs of the original paper) and the
// pair (x1, x2) at position p = pos0 + t becomes
//   (x1 cos a - x2 sin a,  x2 cos a + x1 sin a),   a = p * inv_freq[i],
//   inv_freq[i] = 1 / theta^((2i)/hs),
// computed in fp32 as transformers' LlamaRotaryEmbedding does: the exponent (2i)/hs, the
// power and its reciprocal in fp32, the angle as one fp32 product, cos and sin of it. In
// bf16 mode the pair is widened, rotated in fp32 and rounded once (transformers rounds cos
// and sin to bf16 first and each product too).
#pragma once

#include "kernels/cpu/convert.h"

namespace rz {

// inv_freq[i] = 1 / theta^((2i)/hs), in fp32 (every backend's table comes from here).
float rope_inv_freq(float theta, int hs, int i);

// The rules every backend's rope ops enforce (one line naming the argument): positive
// sizes, hs even, pos0 >= 0 with every position pos0 + t exact in fp32 (below 2^24),
// theta > 1 and finite.
void check_rope_shape(const char* op, int B, int T, int NH, int NKV, int hs, int pos0, float theta);

// In place: the q and k heads of every row rotated by their position's angles.
template <typename E>
void rope_forward(E* qkv,  // (B, T, (NH + 2*NKV)*hs)
                  int B, int T, int NH, int NKV, int hs, int pos0, float theta);

// In place: the transposed rotation (angle -a) of a gradient's q and k heads:
//   (d1, d2) -> (d1 cos a + d2 sin a,  d2 cos a - d1 sin a).
template <typename E>
void rope_backward(E* dqkv,  // (B, T, (NH + 2*NKV)*hs)
                   int B, int T, int NH, int NKV, int hs, int pos0, float theta);

}  // namespace rz
