#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "data/rng.h"
#include "train/config.h"

namespace rz {

uint64_t SampleRng::next_u64() { return splitmix64(&state); }

double SampleRng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int draw_token(const float* logits, int vocab, float temperature, int top_k, SampleRng& rng) {
  RZ_CHECK(vocab >= 1, "sample: no candidate tokens (vocab %d)", vocab);
  if (temperature <= 0.0f) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  const int k = top_k > 0 && top_k < vocab ? top_k : vocab;
  std::vector<int> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((static_cast<double>(logits[idx[i]]) - mx) / temperature);
  const double u = rng.uniform() * sum;
  double acc = 0;
  for (int i = 0; i < k; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[k - 1];
}

std::vector<int> generate_tokens(GPT2& model, std::vector<int> tokens, int n, int T_window, int vocab,
                                 float temperature, int top_k, SampleRng& rng,
                                 const std::function<void(int)>& on_token,
                                 const std::function<bool()>& stop_requested) {
  RZ_CHECK(!tokens.empty(), "sample: the prompt needs at least one token");
  RZ_CHECK(n >= 0 && n <= kMaxSampleTokens, "sample: expected 0..%d tokens, found %d", kMaxSampleTokens, n);
  RZ_CHECK(T_window >= 1 && T_window <= model.config().max_seq_len,
           "sample: a window of %d tokens, expected 1 .. the model's maxT %d", T_window, model.config().max_seq_len);
  if (n == 0) return tokens;
  const int Vp = model.config().padded_vocab_size;
  // The context is tokens.size() + n - 1 tokens long at the last draw; the cache covers it
  // up to the window (and is of no use when the prompt alone is past the window).
  const size_t longest = tokens.size() + size_t(n) - 1;
  const bool cache = tokens.size() <= size_t(T_window);
  struct CacheScope {  // the cache is freed however generation ends
    GPT2* model;
    ~CacheScope() {
      if (model) model->release_kv_cache();
    }
  } scope{cache ? &model : nullptr};
  if (cache) model.reserve_kv_cache(static_cast<int>(std::min<size_t>(longest, size_t(T_window))));
  int cached = 0;  // tokens[0 .. cached) are in the cache
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    if (stop_requested && stop_requested()) break;
    const size_t len = tokens.size();
    const float* row;  // (Vp,) the logits at the last position
    if (cache && len <= size_t(T_window)) {
      model.forward_cached(tokens.data() + cached, static_cast<int>(len) - cached, cached);
      cached = static_cast<int>(len);
      model.logits_f32(logits);
      row = logits.data();
    } else {  // past the window: its positions start elsewhere every token, recomputed whole
      const int t = std::min<int>(static_cast<int>(len), T_window);
      model.forward(tokens.data() + len - static_cast<size_t>(t), nullptr, 1, t);
      model.logits_f32(logits);
      row = logits.data() + static_cast<size_t>(t - 1) * Vp;
    }
    const int next = draw_token(row, vocab, temperature, top_k, rng);
    tokens.push_back(next);
    if (on_token) on_token(next);
  }
  return tokens;
}

}  // namespace rz
