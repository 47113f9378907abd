// kernels/cpu/residual.h: the residual stream's additions. E storage type (convert.h).
#pragma once

#include <cstddef>

namespace rz {

// out = inp1 + inp2, all (N); out may alias either input.
template <typename E>
void residual_forward(E* out, const E* inp1, const E* inp2, size_t N);

// dinp1 += dout; dinp2 += dout (either may be null).
template <typename E>
void residual_backward(E* dinp1, E* dinp2, const E* dout, size_t N);

}  // namespace rz
