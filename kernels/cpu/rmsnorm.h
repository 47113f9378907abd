// kernels/cpu/rmsnorm.h: RMSNorm over the channel dimension (Llama's norm: no mean, no bias).
// Legend: N rows (= B*T), C channels. E storage type, acc_t<E> compute type (convert.h).
//
// Rounding in bf16 mode: the row is widened to fp32, out = x * rstd * weight is computed
// in fp32 and rounded to bf16 once. Hugging Face's LlamaRMSNorm rounds twice (the
// normalised x * rstd to bf16, then weight * that product to bf16 again); the two orders
// differ by at most about one bf16 rounding. In fp32 mode they are the same arithmetic.
#pragma once

#include "kernels/cpu/convert.h"

namespace rz {

// out = inp * rstd * weight per row, rstd = 1 / sqrt(mean_c(inp^2) + eps), saved for backward.
template <typename E>
void rmsnorm_forward(E* out,            // (N, C)
                     acc_t<E>* rstd,    // (N)
                     const E* inp,      // (N, C)
                     const E* weight,   // (C)
                     int N, int C, acc_t<E> eps);

// With norm = inp * rstd and dnorm = weight * dout:
//   dinp += rstd * (dnorm - norm * mean_c(dnorm * norm));  dweight += sum_n norm * dout.
template <typename E>
void rmsnorm_backward(E* dinp,               // (N, C) accumulated
                      E* dweight,            // (C) accumulated
                      const E* dout,         // (N, C)
                      const E* inp,          // (N, C)
                      const E* weight,       // (C)
                      const acc_t<E>* rstd,  // (N)
                      int N, int C);

}  // namespace rz
