// train/generate.h: text samples from the model during training (rank 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt2.h"

namespace rz {

// splitmix64: the sampler's RNG; its one word of state is saved in checkpoints.
struct SampleRng {
  uint64_t state = 0;
  uint64_t next_u64();
  float next_float();  // [0, 1)
};

// Extends `prompt` by n tokens. Each new token comes from the model's logits at the last
// position of a forward over the last T_window tokens (B = 1): greedy when top_k == 0,
// else drawn from the softmax of the top_k logits. Only the first `vocab` logits are
// candidates (the padded rows of wte are never sampled).
std::vector<int> generate_tokens(GPT2& model, std::vector<int> prompt, int n, int T_window, int vocab,
                                 int top_k, SampleRng& rng);

}  // namespace rz
