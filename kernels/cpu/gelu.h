// kernels/cpu/gelu.h: GELU with GPT-2's tanh approximation,
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// E storage type (convert.h). N = number of elements (B*T*4C in the MLP).
#pragma once

#include <cstddef>

namespace rz {

template <typename E>
void gelu_forward(E* out, const E* inp, size_t N);  // (N) each; out may alias inp

// dinp = gelu'(inp) * dout (assigned, not accumulated); dinp may alias dout.
template <typename E>
void gelu_backward(E* dinp, const E* inp, const E* dout, size_t N);

}  // namespace rz
