// kernels/cpu/crossentropy.h: softmax + cross-entropy, and its backward fused with the
// classifier the way llm.c's fused_classifier does it: the backward overwrites the logits
// in place with dlogits, which the classifier's matmul backward then consumes, so no
// probabilities tensor (B, T, Vp) is ever stored.
// Legend: N rows (= B*T), V real vocab, Vp padded vocab (columns V..Vp-1 are ignored).
#pragma once

#include "kernels/cpu/convert.h"

namespace rz {

// losses[n] = lse[n] - logits[n, targets[n]], lse[n] = log sum_{v<V} exp(logits[n, v]).
template <typename E>
void crossentropy_forward(acc_t<E>* losses,  // (N)
                          acc_t<E>* lse,     // (N) saved for backward
                          const E* logits,   // (N, Vp)
                          const int* targets,  // (N) in [0, V)
                          int N, int V, int Vp);

// In place: logits[n, v] <- (softmax(logits[n])[v] - [v == targets[n]]) * dloss for v < V,
// and 0 for the padded columns. dloss is d(total loss)/d(losses[n]), e.g. 1/(B*T).
template <typename E>
void crossentropy_softmax_backward(E* logits_to_dlogits,  // (N, Vp)
                                   const acc_t<E>* lse,   // (N)
                                   const int* targets,    // (N)
                                   acc_t<E> dloss, int N, int V, int Vp);

}  // namespace rz
