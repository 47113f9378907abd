#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"

namespace rz {

uint64_t SampleRng::next_u64() {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float SampleRng::next_float() { return static_cast<float>(next_u64() >> 40) / 16777216.0f; }

std::vector<int> generate_tokens(GPT2& model, std::vector<int> tokens, int n, int T_window, int vocab,
                                 int top_k, SampleRng& rng) {
  RZ_CHECK(!tokens.empty(), "sample: the prompt needs at least one token");
  const int Vp = model.config().padded_vocab_size;
  std::vector<float> logits;
  std::vector<int> idx(static_cast<size_t>(vocab));
  for (int i = 0; i < n; ++i) {
    const int t = std::min<int>(static_cast<int>(tokens.size()), T_window);
    const int* window = tokens.data() + tokens.size() - static_cast<size_t>(t);
    model.forward(window, nullptr, 1, t);
    model.logits_f32(logits);
    const float* row = logits.data() + static_cast<size_t>(t - 1) * Vp;  // (Vp,) at the last position
    int next;
    if (top_k <= 0) {
      next = static_cast<int>(std::max_element(row, row + vocab) - row);
    } else {
      const int k = std::min(top_k, vocab);
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return row[a] > row[b]; });
      const float mx = row[idx[0]];
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += std::exp(static_cast<double>(row[idx[j]] - mx));
      double u = rng.next_float() * sum;
      next = idx[k - 1];
      for (int j = 0; j < k; ++j) {
        u -= std::exp(static_cast<double>(row[idx[j]] - mx));
        if (u <= 0) {
          next = idx[j];
          break;
        }
      }
    }
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace rz
