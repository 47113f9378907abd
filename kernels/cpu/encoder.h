// kernels/cpu/encoder.h: token + position embedding.
// Legend: B batch, T time, C channels, Vp padded vocab, maxT rows of wpe.
// E is the storage type (float, bf16, double; see convert.h).
#pragma once

namespace rz {

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
template <typename E>
void encoder_forward(E* out,          // (B, T, C)
                     const int* inp,  // (B, T) token ids in [0, Vp)
                     const E* wte,    // (Vp, C)
                     const E* wpe,    // (maxT, C), T <= maxT
                     int B, int T, int C);

// dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]  (accumulates)
template <typename E>
void encoder_backward(E* dwte,          // (Vp, C)
                      E* dwpe,          // (maxT, C)
                      const E* dout,    // (B, T, C)
                      const int* inp,   // (B, T)
                      int B, int T, int C);

}  // namespace rz
