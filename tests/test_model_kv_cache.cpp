// Sampling with a KV cache (GPT2::forward_cached, train/generate.h) against the full
// recompute it replaces, on the CPU and on the simulated device, in fp32 and bf16:
//   - the logits at every position 0 .. maxT-1, one token at a time, and after prompts and
//     chunks of several tokens, and after a rewind, within tests/gpu_compare.h's bounds of
//     a full forward's logits at that position (the simulated device: bitwise the CPU's);
//   - greedy generation on a sharpened model (random weights scaled up, so no near-ties)
//     gives the tokens a loop of full forwards gives, past the window too (the fallback);
//   - the cache's refusals and its emptying by a training forward.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "base/check.h"
#include "kernels/registry/device_registry.h"
#include "model/gpt2.h"
#include "tests/gpu_compare.h"
#include "train/generate.h"

using namespace rz;
using namespace rz::test;

namespace {

GPT2Config kv_config() {
  GPT2Config c;
  c.num_layers = 2;
  c.channels = 48;
  c.num_heads = 4;   // hs 12
  c.vocab_size = 100;  // Vp 128
  c.max_seq_len = 40;
  finalize_config(c);
  return c;
}

std::vector<int> random_tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int> t(n);
  for (int& x : t) x = int(g() % uint64_t(V));
  return t;
}

// llm.c's init (std 0.02) leaves attention nearly uniform; scaled up, its scores and
// logits are far apart, so a wrong score or position shows, and greedy draws have no
// near-ties.
constexpr float kSharpen = 4.0f;

// The model with llm.c's init, every parameter then multiplied by `sharpen`.
std::unique_ptr<GPT2> make_model(Precision p, Device dev, float sharpen = 1.0f) {
  ModelOptions o(p, Recompute::none, dev);
  if (!dev.is_cpu()) o.backend = make_backend(dev);
  auto m = std::make_unique<GPT2>(kv_config(), o);
  m->init_random(11);
  if (sharpen != 1.0f) {
    std::vector<float> w(m->layout().total);
    m->get_params_f32(w.data());
    for (float& x : w) x *= sharpen;
    m->set_params_f32(w.data());
  }
  return m;
}

// (T, Vp) logits of a full forward over tokens[0 .. T).
std::vector<float> full_logits(GPT2& m, const std::vector<int>& tokens, int T) {
  m.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> l;
  m.logits_f32(l);
  return l;
}

std::vector<float> row(const std::vector<float>& logits, int t, int Vp) {
  return {logits.begin() + size_t(t) * Vp, logits.begin() + size_t(t + 1) * Vp};
}

// The cached logits of the last position after forward_cached(tokens[pos .. pos + n)).
std::vector<float> cached_logits(GPT2& m, const std::vector<int>& tokens, int n, int pos) {
  m.forward_cached(tokens.data() + pos, n, pos);
  std::vector<float> l;
  m.logits_f32(l);
  return l;
}

void check_close(const char* what, int pos, const std::vector<float>& got, const std::vector<float>& ref, Tol t) {
  const Outside o = outside_tolerance(got, ref, t);
  INFO(what << " at position " << pos << " (rms " << o.rms << "):\n" << o.first);
  REQUIRE(o.bad == 0);
}

struct Case {
  Precision precision;
  Device device;
};

}  // namespace

TEST_CASE("cached logits equal the full forward's at every position", "[model][kv]") {
  for (Case c : {Case{Precision::fp32, Device{}}, Case{Precision::bf16, Device{}},
                 Case{Precision::fp32, Device{DeviceKind::sim, 0}}, Case{Precision::bf16, Device{DeviceKind::sim, 0}}}) {
    CAPTURE(precision_name(c.precision), device_name(c.device));
    const Tol t = c.precision == Precision::bf16 ? tol<bf16>() : tol<float>();
    auto m = make_model(c.precision, c.device, kSharpen);
    const GPT2Config& cfg = m->config();
    const int maxT = cfg.max_seq_len, Vp = cfg.padded_vocab_size;
    const auto tokens = random_tokens(size_t(maxT), cfg.vocab_size, 3);
    const auto full = full_logits(*m, tokens, maxT);  // causal: row t sees tokens 0 .. t

    m->reserve_kv_cache(maxT);
    std::vector<std::vector<float>> one_by_one;
    for (int pos = 0; pos < maxT; ++pos) {
      one_by_one.push_back(cached_logits(*m, tokens, 1, pos));
      check_close("one token at a time", pos, one_by_one.back(), row(full, pos, Vp), t);
    }
    REQUIRE(m->kv_cached_positions() == maxT);

    // A prompt of 7 in one call, then chunks of 3 (the last one 3 as well: 7 + 11 * 3 = 40).
    m->reserve_kv_cache(maxT);
    int pos = 0;
    for (int n : {7, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}) {
      const auto got = cached_logits(*m, tokens, n, pos);
      pos += n;
      check_close("chunks", pos - 1, got, row(full, pos - 1, Vp), t);
    }
    REQUIRE(pos == maxT);

    // A rewind: another token at position 10 continues a different sequence.
    auto other = tokens;
    other[10] = (tokens[10] + 1) % cfg.vocab_size;
    const auto got = cached_logits(*m, other, 1, 10);
    const auto ref = full_logits(*m, other, 11);
    check_close("after a rewind", 10, got, row(ref, 10, Vp), t);

    if (c.device.kind == DeviceKind::sim) {  // the CPU's ops behind a guard: bitwise the CPU's
      auto host = make_model(c.precision, Device{}, kSharpen);
      host->reserve_kv_cache(maxT);
      for (int p = 0; p < maxT; ++p) {
        const auto h = cached_logits(*host, tokens, 1, p);
        REQUIRE(std::memcmp(h.data(), one_by_one[size_t(p)].data(), h.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("greedy tokens with the cache are the full recompute's, past the window too", "[model][kv]") {
  for (Case c : {Case{Precision::fp32, Device{}}, Case{Precision::bf16, Device{}},
                 Case{Precision::bf16, Device{DeviceKind::sim, 0}}}) {
    CAPTURE(precision_name(c.precision), device_name(c.device));
    auto m = make_model(c.precision, c.device, kSharpen);
    const GPT2Config& cfg = m->config();
    for (int window : {cfg.max_seq_len, 16}) {
      CAPTURE(window);
      const std::vector<int> prompt = {5, 17, 42};
      const int n = window + 12;  // the last 15 draws are past the window
      SampleRng rng{1};
      const auto got = generate_tokens(*m, prompt, n, window, cfg.vocab_size, 0.0f, 0, rng);
      std::vector<int> want = prompt;
      std::vector<float> logits;
      for (int i = 0; i < n; ++i) {
        const int t = std::min<int>(int(want.size()), window);
        m->forward(want.data() + want.size() - size_t(t), nullptr, 1, t);
        m->logits_f32(logits);
        const float* last = logits.data() + size_t(t - 1) * cfg.padded_vocab_size;
        want.push_back(int(std::max_element(last, last + cfg.vocab_size) - last));
      }
      REQUIRE(got == want);
      // Sharp enough that this checks something: not one token repeated throughout.
      REQUIRE(std::count(want.begin(), want.end(), want.back()) < int(want.size()) / 2);
      REQUIRE(m->kv_cached_positions() == 0);  // generation frees its cache
    }
  }
}

TEST_CASE("the KV cache refuses what it cannot hold, and a forward empties it", "[model][kv]") {
  auto m = make_model(Precision::fp32, Device{});
  const auto tokens = random_tokens(40, m->config().vocab_size, 5);
  REQUIRE_THROWS_WITH(m->forward_cached(tokens.data(), 1, 0), Catch::Contains("no KV cache"));
  REQUIRE_THROWS_WITH(m->reserve_kv_cache(41), Catch::Contains("reserve_kv_cache: 41 positions"));
  m->reserve_kv_cache(8);
  REQUIRE_THROWS_WITH(m->forward_cached(tokens.data(), 2, 1), Catch::Contains("positions 1 .. 2, but the cache holds 0"));
  m->forward_cached(tokens.data(), 5, 0);
  REQUIRE_THROWS_WITH(m->forward_cached(tokens.data(), 4, 5), Catch::Contains("of room for 8"));
  const int bad = m->config().vocab_size;
  REQUIRE_THROWS_WITH(m->forward_cached(&bad, 1, 5), Catch::Contains("input token 100 at position 5"));
  REQUIRE(m->kv_cached_positions() == 5);
  m->forward(tokens.data(), tokens.data() + 1, 1, 8);
  REQUIRE(m->kv_cached_positions() == 0);
  REQUIRE_THROWS_WITH(m->forward_cached(tokens.data() + 5, 1, 5), Catch::Contains("but the cache holds 0"));
}
