// train/generate.h: the one sampler, behind `ringzero sample` and the samples rank 0
// prints during training.
//
// Generation keeps a KV cache (GPT2::forward_cached): the prompt is one forward, and each
// new token then costs one position's forward, not the window's. Positions are absolute
// (GPT-2's wpe rows, Llama's rotation angles of the cached keys), so the cache is exact only
// while the whole context fits the window (at most maxT tokens); past it every token's
// window starts one position later, and each token recomputes the window as a full forward
// over its last T_window tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt2.h"

namespace rz {

// The sampler's random numbers: splitmix64 over one word of state (saved in training
// checkpoints, so a resumed run draws the same samples).
struct SampleRng {
  uint64_t state = 0;
  uint64_t next_u64();
  double uniform();  // [0, 1) with 53 random bits
};

// One token drawn from logits (vocab,): greedy (the first largest) when temperature <= 0,
// else from softmax(logits / temperature) restricted to the top_k largest (all when
// top_k <= 0). Equal logits are ranked by token id, so the draw does not depend on the
// standard library's sort.
int draw_token(const float* logits, int vocab, float temperature, int top_k, SampleRng& rng);

// Extends `prompt` (at least one token) by n tokens, each drawn by draw_token from the
// model's logits at the last position of the last T_window tokens (B = 1): from the KV
// cache while the context fits the window, from a forward over the window after that.
// Only the first `vocab` logits are candidates (the padded rows of wte are never drawn).
// on_token, when given, sees each new token as it is drawn (for printing as it goes);
// stop_requested, when given, is asked before each token, and true ends the generation early
// with the tokens drawn so far (a stop signal during a long sample). n is at most
// kMaxSampleTokens (train/config.h).
std::vector<int> generate_tokens(GPT2& model, std::vector<int> prompt, int n, int T_window, int vocab,
                                 float temperature, int top_k, SampleRng& rng,
                                 const std::function<void(int)>& on_token = {},
                                 const std::function<bool()>& stop_requested = {});

}  // namespace rz
