// kernels/cpu/layernorm.h: layer normalisation over the channel dimension.
// Legend: N rows (= B*T), C channels. E storage type, acc_t<E> compute type (convert.h).
#pragma once

#include "kernels/cpu/convert.h"

namespace rz {

constexpr double kLayerNormEps = 1e-5;

// out = (inp - mean) * rstd * weight + bias, per row; saves mean and rstd for backward.
template <typename E>
void layernorm_forward(E* out,               // (N, C)
                       acc_t<E>* mean,       // (N)
                       acc_t<E>* rstd,       // (N) 1 / sqrt(var + eps)
                       const E* inp,         // (N, C)
                       const E* weight,      // (C)
                       const E* bias,        // (C)
                       int N, int C);

// dinp += d out/d inp * dout; dweight += sum_n norm * dout; dbias += sum_n dout.
template <typename E>
void layernorm_backward(E* dinp,              // (N, C) accumulated
                        E* dweight,           // (C) accumulated
                        E* dbias,             // (C) accumulated
                        const E* dout,        // (N, C)
                        const E* inp,         // (N, C)
                        const E* weight,      // (C)
                        const acc_t<E>* mean,  // (N)
                        const acc_t<E>* rstd,  // (N)
                        int N, int C);

}  // namespace rz
