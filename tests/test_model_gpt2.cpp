// The whole model against an independent fp64 reference, the GradSink contract, bf16 vs
// fp32, recompute, and overfitting one batch with the AdamW kernel.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "base/memory.h"
#include "kernels/cpu/adamw.h"
#include "model/llmc_file.h"
#include "model/gpt2.h"
#include "test_model_reference.h"

using namespace rz;

namespace {

reftest::RefConfig ref_config(const GPT2Config& c) {
  return {c.num_layers, c.channels, c.num_heads, c.vocab_size, c.padded_vocab_size, c.max_seq_len};
}

GPT2Config small_config() {
  GPT2Config c;
  c.num_layers = 2;
  c.channels = 8;
  c.num_heads = 2;
  c.vocab_size = 11;
  c.max_seq_len = 8;
  finalize_config(c);
  return c;
}

// Random parameters in llm.c order: layernorm weights near 1, everything else N(0, 0.3).
std::vector<double> random_llmc_params(const GPT2Config& cfg, uint64_t seed) {
  reftest::RefOffsets o(ref_config(cfg));
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, 0.3);
  std::vector<double> p(o.total);
  for (double& x : p) x = double(float(d(g)));  // representable in fp32
  auto ones = [&](size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i) p[off + i] = double(float(1.0 + 0.1 * d(g)));
  };
  ones(o.ln1w, size_t(cfg.num_layers) * cfg.channels);
  ones(o.ln2w, size_t(cfg.num_layers) * cfg.channels);
  ones(o.lnfw, cfg.channels);
  return p;
}

std::vector<float> to_internal(const GPT2Config& cfg, const std::vector<double>& llmc) {
  std::vector<float> f(llmc.begin(), llmc.end()), internal(f.size());
  llmc_to_internal(cfg, f.data(), internal.data());
  return internal;
}

std::vector<double> to_llmc(const GPT2Config& cfg, const std::vector<float>& internal) {
  std::vector<float> f(internal.size());
  internal_to_llmc(cfg, internal.data(), f.data());
  return std::vector<double>(f.begin(), f.end());
}

std::vector<int> tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int> t(n);
  for (int& x : t) x = int(g() % uint64_t(V));
  return t;
}

std::vector<float> grads_f32(const FullGradSink& sink_in, Precision p) {
  auto& sink = const_cast<FullGradSink&>(sink_in);
  std::vector<float> g(sink.total());
  if (p == Precision::fp32)
    std::memcpy(g.data(), sink.data(), g.size() * 4);
  else
    for (size_t i = 0; i < g.size(); ++i) g[i] = bf16_to_float(static_cast<bf16*>(sink.data())[i]);
  return g;
}

// A sink like ZeRO-2's: a fresh zeroed buffer per request, never adjacent to another, and
// a log of the contract (ranges inside one tensor, ready ranges consecutive and in order).
struct StagingSink : GradSink {
  const ParamLayout& layout;
  std::vector<std::pair<size_t, std::vector<float>>> staged;  // (offset, values)
  std::vector<std::pair<size_t, size_t>> ready;
  size_t ready_end = 0;
  bool begun = false, ended = false, wte_before_first_ready = false;
  std::vector<std::string> violations;
  explicit StagingSink(const ParamLayout& l) : layout(l) {}
  void begin_backward() override { begun = true; }
  void* grad_ptr(size_t offset, size_t count) override {
    bool inside = false;
    for (const auto& t : layout.tensors)
      if (offset >= t.offset && offset + count <= t.offset + t.numel) inside = true;
    if (!inside) violations.push_back("range crosses a tensor boundary");
    if (offset < ready_end) violations.push_back("grad_ptr for a range already reported ready");
    if (offset == layout.find(ParamKind::wte).offset && ready.empty()) wte_before_first_ready = true;
    staged.emplace_back(offset, std::vector<float>(count + 16, 0.0f));
    return staged.back().second.data();
  }
  void grads_ready(size_t begin, size_t end) override {
    if (begin != ready_end || end <= begin) violations.push_back("ready ranges not consecutive");
    ready.emplace_back(begin, end);
    ready_end = end;
  }
  void end_backward() override { ended = true; }
};

}  // namespace

TEST_CASE("fp32 model matches the fp64 reference: logits, loss and FD gradients", "[model]") {
  const GPT2Config cfg = small_config();
  const int B = 2, T = 4;
  std::vector<double> p = random_llmc_params(cfg, 7);
  // padded wte rows hold junk on purpose: they must not change the loss or get gradient
  std::vector<int> x = tokens(B * T, cfg.vocab_size, 1), y = tokens(B * T, cfg.vocab_size, 2);
  const auto rc = ref_config(cfg);
  std::vector<double> ref_logits;
  const double ref_loss = reftest::ref_forward(rc, p, x.data(), y.data(), B, T, &ref_logits);
  const std::vector<double> ref_grad = reftest::ref_grads_fd(rc, p, x.data(), y.data(), B, T);

  GPT2 model(cfg, ModelOptions{});
  model.set_params_f32(to_internal(cfg, p).data());
  const float loss = model.forward(x.data(), y.data(), B, T);
  std::vector<float> logits;
  model.logits_f32(logits);
  double max_logit_diff = 0;
  for (int n = 0; n < B * T; ++n)
    for (int v = 0; v < cfg.vocab_size; ++v)
      max_logit_diff = std::max(max_logit_diff,
                                std::abs(logits[size_t(n) * cfg.padded_vocab_size + v] - ref_logits[size_t(n) * cfg.vocab_size + v]));
  FullGradSink sink(model.layout().total, Precision::fp32);
  model.backward(sink);
  const std::vector<double> g = to_llmc(cfg, grads_f32(sink, Precision::fp32));

  std::printf("fp32 vs fp64 reference: |loss diff| %.3g, max |logit diff| %.3g\n", std::abs(loss - ref_loss),
              max_logit_diff);
  CHECK(std::abs(loss - ref_loss) < 1e-5);
  CHECK(max_logit_diff < 1e-5);
  // per tensor: max |ours - fd| relative to the tensor's largest gradient
  const ParamLayout& lay = model.layout();
  double worst = 0;
  for (const ParamTensor& t : lay.tensors) {
    std::vector<float> one(lay.total, 0.0f);
    for (size_t i = 0; i < t.numel; ++i) one[t.offset + i] = 1.0f;
    std::vector<double> mask = to_llmc(cfg, one);
    double err = 0, mx = 0;
    for (size_t i = 0; i < mask.size(); ++i)
      if (mask[i] != 0) {
        err = std::max(err, std::abs(g[i] - ref_grad[i]));
        mx = std::max(mx, std::abs(ref_grad[i]));
      }
    INFO(t.name << ": max abs err " << err << ", max |grad| " << mx);
    CHECK(err <= 1e-4 * mx + 1e-7);
    if (mx > 0) worst = std::max(worst, err / mx);
  }
  std::printf("fp32 gradients vs fp64 finite differences: worst tensor max-rel error %.3g\n", worst);
  // padded rows of wte: zero gradient
  const ParamTensor& wte = lay.find(ParamKind::wte);
  const std::vector<float> gi = grads_f32(sink, Precision::fp32);
  for (size_t i = size_t(cfg.vocab_size) * cfg.channels; i < wte.numel; ++i) REQUIRE(gi[wte.offset + i] == 0.0f);
}

TEST_CASE("tiny preset: gradients of sampled parameters match FD of the reference", "[model]") {
  const GPT2Config cfg = model_preset("tiny");
  const int B = 2, T = 8;
  GPT2 model(cfg, ModelOptions{});
  model.init_random(3);
  std::vector<float> w(model.layout().total);
  model.get_params_f32(w.data());
  std::vector<double> p = to_llmc(cfg, w);
  std::vector<int> x = tokens(B * T, cfg.vocab_size, 5), y = tokens(B * T, cfg.vocab_size, 6);
  model.forward(x.data(), y.data(), B, T);
  FullGradSink sink(model.layout().total, Precision::fp32);
  model.backward(sink);
  const std::vector<double> g = to_llmc(cfg, grads_f32(sink, Precision::fp32));
  // sample 4 elements of every tensor (llm.c order) plus the largest-gradient ones
  std::mt19937_64 rng(9);
  std::vector<size_t> which;
  for (const ParamTensor& t : model.layout().tensors) {
    std::vector<float> one(model.layout().total, 0.0f);
    one[t.offset + rng() % t.numel] = 1.0f;
    std::vector<double> m = to_llmc(cfg, one);
    which.push_back(size_t(std::find(m.begin(), m.end(), 1.0) - m.begin()));
  }
  std::vector<size_t> order(g.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](size_t a, size_t b) { return std::abs(g[a]) > std::abs(g[b]); });
  which.insert(which.end(), order.begin(), order.begin() + 40);
  const auto fd = reftest::ref_grads_fd(ref_config(cfg), p, x.data(), y.data(), B, T, which);
  double gmax = 0, err = 0;
  for (size_t i : which) {
    gmax = std::max(gmax, std::abs(fd[i]));
    err = std::max(err, std::abs(fd[i] - g[i]));
  }
  std::printf("tiny preset, %zu sampled gradients: max abs err %.3g, max |grad| %.3g\n", which.size(), err, gmax);
  CHECK(err < 1e-4 * gmax);
}

TEST_CASE("backward honours the GradSink contract with non-adjacent staging buffers", "[model][sink]") {
  const GPT2Config cfg = model_preset("tiny");
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    if (prec == Precision::bf16) continue;  // staging floats below; bf16 covered by FullGradSink tests
    GPT2 model(cfg, ModelOptions{prec, Recompute::none});
    model.init_random(11);
    const int B = 2, T = 16;
    std::vector<int> x = tokens(B * T, cfg.vocab_size, 12), y = tokens(B * T, cfg.vocab_size, 13);
    model.forward(x.data(), y.data(), B, T);
    FullGradSink full(model.layout().total, prec);
    model.backward(full);
    model.forward(x.data(), y.data(), B, T);
    StagingSink st(model.layout());
    model.backward(st);
    for (const auto& v : st.violations) FAIL(v);
    CHECK(st.begun);
    CHECK(st.ended);
    CHECK(st.wte_before_first_ready);
    const ParamLayout& lay = model.layout();
    // One report per (weight, bias) pair, right after its op: lnf, 6 per layer, embeddings.
    REQUIRE(st.ready.size() == 6 * size_t(cfg.num_layers) + 2);
    CHECK(st.ready == grad_ready_ranges(lay));
    CHECK(st.ready.front() == std::make_pair(size_t(0), size_t(2 * cfg.channels)));  // lnf first
    CHECK(st.ready.back() == std::make_pair(lay.find(ParamKind::wpe).offset, lay.total));
    for (int l = cfg.num_layers - 1, k = 1; l >= 0; --l, k += 6) {
      CHECK(st.ready[k].first == lay.find(ParamKind::fcprojw, l).offset);
      CHECK(st.ready[k + 5].second == lay.find(ParamKind::ln1b, l).offset + size_t(cfg.channels));
    }
    std::vector<float> staged(lay.total, 0.0f);
    for (const auto& [off, vals] : st.staged)
      for (size_t i = 0; i + 16 < vals.size() + 0 && off + i < lay.total; ++i) staged[off + i] += vals[i];
    for (const auto& [off, vals] : st.staged)
      for (size_t i = vals.size() - 16; i < vals.size(); ++i) REQUIRE(vals[i] == 0.0f);  // no overrun
    std::vector<float> ref = grads_f32(full, prec);
    REQUIRE(std::memcmp(staged.data(), ref.data(), ref.size() * 4) == 0);
  }
}

TEST_CASE("gradients accumulate across backwards; recompute_gelu changes nothing", "[model]") {
  const GPT2Config cfg = model_preset("tiny");
  const int B = 2, T = 8;
  std::vector<int> x = tokens(B * T, cfg.vocab_size, 21), y = tokens(B * T, cfg.vocab_size, 22);
  GPT2 a(cfg, ModelOptions{Precision::fp32, Recompute::none}), b(cfg, ModelOptions{Precision::fp32, Recompute::gelu});
  a.init_random(4);
  b.init_random(4);
  FullGradSink ga(a.layout().total, Precision::fp32), gb(b.layout().total, Precision::fp32);
  REQUIRE(a.forward(x.data(), y.data(), B, T) == b.forward(x.data(), y.data(), B, T));
  a.backward(ga, 0.5f);
  b.backward(gb, 0.5f);
  std::vector<float> g1 = grads_f32(ga, Precision::fp32);
  REQUIRE(std::memcmp(g1.data(), grads_f32(gb, Precision::fp32).data(), g1.size() * 4) == 0);
  a.forward(x.data(), y.data(), B, T);
  a.backward(ga, 0.5f);
  std::vector<float> g2 = grads_f32(ga, Precision::fp32);
  for (size_t i = 0; i < g1.size(); i += 97) REQUIRE(g2[i] == Approx(2 * g1[i]).margin(1e-7));
  CHECK_THROWS_AS(a.backward(ga), Error);  // logits already turned into dlogits
}

TEST_CASE("bf16 mode agrees with fp32 within bf16 tolerance", "[model][bf16]") {
  const GPT2Config cfg = model_preset("tiny");
  const int B = 4, T = 32;
  GPT2 f(cfg, ModelOptions{Precision::fp32, Recompute::none}), h(cfg, ModelOptions{Precision::bf16, Recompute::none});
  h.init_random(8);
  std::vector<float> w(h.layout().total);
  h.get_params_f32(w.data());  // bf16-representable weights for both
  f.set_params_f32(w.data());
  std::vector<int> x = tokens(B * T, cfg.vocab_size, 31), y = tokens(B * T, cfg.vocab_size, 32);
  const float lf = f.forward(x.data(), y.data(), B, T), lh = h.forward(x.data(), y.data(), B, T);
  std::printf("loss fp32 %.6f bf16 %.6f\n", lf, lh);
  CHECK(std::abs(lf - lh) < 1e-2 * lf);
  FullGradSink gf(f.layout().total, Precision::fp32), gh(h.layout().total, Precision::bf16);
  f.backward(gf);
  h.backward(gh);
  std::vector<float> a = grads_f32(gf, Precision::fp32), b = grads_f32(gh, Precision::bf16);
  double worst = 0;
  for (const ParamTensor& t : f.layout().tensors) {
    double num = 0, den = 0;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      den += double(a[i]) * a[i];
    }
    if (den == 0) continue;
    double rel = std::sqrt(num / den);
    INFO(t.name << " relative L2 error " << rel);
    CHECK(rel < 0.05);
    worst = std::max(worst, rel);
  }
  std::printf("bf16 vs fp32 gradients: worst tensor relative L2 error %.3g\n", worst);
}

TEST_CASE("tiny model overfits one batch with AdamW", "[model][train]") {
  // 300 small steps: on shared CI cores OpenMP barriers in regions this small cost more
  // than they save, so this case runs on one thread (the other cases cover threading).
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    const GPT2Config cfg = model_preset("tiny");
    const int B = 4, T = 16;
    GPT2 model(cfg, ModelOptions{prec, Recompute::none});
    model.init_random(1);
    const ParamLayout& lay = model.layout();
    std::vector<float> master(lay.total), m(lay.total, 0.0f), v(lay.total, 0.0f);
    model.get_params_f32(master.data());
    std::vector<int> x = tokens(B * T, cfg.vocab_size, 41), y = tokens(B * T, cfg.vocab_size, 42);
    FullGradSink sink(lay.total, prec);
    float first = 0, last = 0;
    const int steps = 150;
    for (int step = 1; step <= steps; ++step) {
      last = model.forward(x.data(), y.data(), B, T);
      if (step == 1) first = last;
      sink.zero();
      model.backward(sink);
      for (const ParamTensor& t : lay.tensors) {
        AdamWStep s;
        s.lr = 3e-3f;
        s.t = uint64_t(step);
        s.weight_decay = t.weight_decay ? 0.1f : 0.0f;
        if (prec == Precision::fp32)
          adamw_update<float, float>(static_cast<float*>(model.params()) + t.offset, nullptr, m.data() + t.offset,
                                     v.data() + t.offset, static_cast<float*>(sink.data()) + t.offset, t.numel, s);
        else
          adamw_update<bf16, bf16>(static_cast<bf16*>(model.params()) + t.offset, master.data() + t.offset,
                                   m.data() + t.offset, v.data() + t.offset,
                                   static_cast<bf16*>(sink.data()) + t.offset, t.numel, s);
      }
    }
    std::printf("overfit %s: loss %.4f -> %.4f in %d steps\n", precision_name(prec), first, last, steps);
    CHECK(first == Approx(std::log(257.0)).epsilon(0.05));
    CHECK(last < 0.1f * first);
  }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("bad inputs to forward/backward are one-line errors", "[model]") {
  const GPT2Config cfg = model_preset("tiny");
  GPT2 model(cfg, ModelOptions{});
  std::vector<int> x(8, 1), bad(8, 1);
  bad[3] = cfg.vocab_size;
  FullGradSink sink(model.layout().total, Precision::fp32);
  CHECK_THROWS_WITH(model.backward(sink), Catch::Contains("forward with targets"));
  CHECK_THROWS_WITH(model.forward(bad.data(), x.data(), 1, 8), Catch::Contains("outside [0, 257)"));
  CHECK_THROWS_WITH(model.forward(x.data(), bad.data(), 1, 8), Catch::Contains("target token"));
  std::vector<int> longx(65, 1);
  CHECK_THROWS_WITH(model.forward(longx.data(), nullptr, 1, 65), Catch::Contains("maxT=64"));
  CHECK_THROWS_WITH(model_preset("d13"), Catch::Contains("unknown model preset 'd13'"));
  GPT2Config odd = cfg;
  odd.num_heads = 5;
  CHECK_THROWS_WITH(finalize_config(odd), Catch::Contains("multiple of num_heads"));
}

TEST_CASE("presets, layout order and activation accounting", "[model]") {
  GPT2Config d12 = model_preset("d12");
  CHECK(num_parameters(d12) == 124475904);  // GPT-2 124M with Vp = 50304, as llm.c counts it
  CHECK(model_preset("d2").channels == 128);
  CHECK(model_preset("d48").num_heads == 25);
  const ParamLayout lay = build_param_layout(model_preset("tiny"));
  CHECK(lay.tensors.front().name == "lnfw");
  CHECK(lay.tensors[2].name == "h1.fcprojw");
  CHECK(lay.tensors.back().name == "wte");
  CHECK(lay.find(ParamKind::qkvw, 0).shape == std::vector<size_t>{192, 64});
  CHECK(lay.find(ParamKind::qkvb, 0).weight_decay == false);
  CHECK(lay.find(ParamKind::wpe).weight_decay == true);

  const GPT2Config cfg = model_preset("tiny");
  const size_t before = MemoryTracker::global().current(MemTag::activations);
  {
    GPT2 model(cfg, ModelOptions{});
    std::vector<int> x(2 * 16, 3);
    model.forward(x.data(), nullptr, 2, 16);
    CHECK(MemoryTracker::global().current(MemTag::activations) - before ==
          GPT2::activation_bytes(cfg, ModelOptions{}, 2, 16));
  }
  CHECK(GPT2::activation_bytes(cfg, ModelOptions{Precision::fp32, Recompute::gelu}, 2, 16) <
        GPT2::activation_bytes(cfg, ModelOptions{}, 2, 16));
}

// Recompute::layer keeps only each block's input and reruns the block in backward: the
// losses and every gradient tensor must be bitwise those of Recompute::none (and gelu),
// in both precisions, on the tiny model and a d2-shaped one (C=128, NH=2), over two
// forward/backward rounds with different batches (the second reuses the scratch).
TEST_CASE("recompute layer gives bitwise the gradients of none and gelu", "[model][recompute]") {
  GPT2Config d2 = model_preset("d2");
  d2.vocab_size = 300;  // a small vocabulary keeps the test fast; the blocks are d2's
  d2.max_seq_len = 32;
  for (const GPT2Config& cfg : {model_preset("tiny"), d2}) {
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
      INFO("L=" << cfg.num_layers << " C=" << cfg.channels << " " << precision_name(prec));
      const int B = 2, T = std::min(16, cfg.max_seq_len);
      std::vector<std::vector<float>> grads;
      std::vector<float> losses;
      for (Recompute r : kRecomputes) {
        GPT2 m(cfg, ModelOptions{prec, r});
        m.init_random(5);
        FullGradSink g(m.layout().total, prec);
        for (int round = 0; round < 2; ++round) {
          std::vector<int> x = tokens(B * T, cfg.vocab_size, 40 + round), y = tokens(B * T, cfg.vocab_size, 50 + round);
          losses.push_back(m.forward(x.data(), y.data(), B, T));
          m.backward(g, 0.5f);
        }
        grads.push_back(grads_f32(g, prec));
      }
      for (size_t r = 1; r < grads.size(); ++r) {
        INFO("recompute " << recompute_name(kRecomputes[r]));
        CHECK(losses[2 * r] == losses[0]);
        CHECK(losses[2 * r + 1] == losses[1]);
        GPT2 probe(cfg, ModelOptions{prec});
        for (const ParamTensor& t : probe.layout().tensors) {
          INFO(t.name);
          REQUIRE(std::memcmp(grads[r].data() + t.offset, grads[0].data() + t.offset, t.numel * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("activation_bytes is what the tracker sees, in every recompute mode", "[model][recompute]") {
  const GPT2Config cfg = model_preset("tiny");
  MemoryTracker& mt = MemoryTracker::global();
  std::vector<size_t> bytes;
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    for (Recompute r : kRecomputes) {
      const size_t before = mt.current(MemTag::activations);
      const int B = 3, T = 24;
      {
        GPT2 m(cfg, ModelOptions{prec, r});
        m.init_random(1);
        std::vector<int> x = tokens(B * T, cfg.vocab_size, 1);
        m.forward(x.data(), x.data(), B, T);
        const size_t want = GPT2::activation_bytes(cfg, ModelOptions{prec, r}, B, T);
        CHECK(mt.current(MemTag::activations) - before == want);
        bytes.push_back(want);
      }
      CHECK(mt.current(MemTag::activations) == before);
    }
    // none > gelu > layer, and layer keeps per layer only (N, C) of the residual stream.
    const size_t n = bytes.size();
    CHECK(bytes[n - 3] > bytes[n - 2]);
    CHECK(bytes[n - 2] > bytes[n - 1]);
  }
  // Going from gelu to layer saves, per layer but one, everything except res3 and the GELU output.
  GPT2Config big = cfg;
  big.num_layers = 6;
  const size_t l2 = GPT2::activation_bytes(cfg, ModelOptions{Precision::fp32, Recompute::layer}, 4, 32);
  const size_t l6 = GPT2::activation_bytes(big, ModelOptions{Precision::fp32, Recompute::layer}, 4, 32);
  CHECK(l6 - l2 == 4 * size_t(4 * 32 * cfg.channels) * sizeof(float));  // 4 more layers x (N, C)
}

// Attention::flash saves each row's log-sum-exp instead of the (T, T) probabilities. Its
// forward runs the same products, so the losses are bitwise those of the materialised
// path; its gradients differ by the rounding of recomputing the probabilities (fp32:
// ~1e-6 relative per tensor; bf16: the materialised path reads them rounded to bf16).
// With recompute layer on top, the gradients are bitwise those of flash without it.
TEST_CASE("flash attention: same losses, gradients within rounding, fewer activation bytes", "[model][attention]") {
  GPT2Config cfg = model_preset("tiny");
  const int B = 2, T = 40;  // two 32-query row blocks
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(prec));
    std::vector<std::vector<float>> grads;
    std::vector<float> losses;
    struct Mode {
      Attention att;
      Recompute rc;
    };
    for (Mode mode : {Mode{Attention::materialized, Recompute::none}, Mode{Attention::flash, Recompute::none},
                      Mode{Attention::flash, Recompute::layer}}) {
      ModelOptions mo{prec, mode.rc};
      mo.attention = mode.att;
      GPT2 m(cfg, mo);
      m.init_random(9);
      FullGradSink g(m.layout().total, prec);
      std::vector<int> x = tokens(B * T, cfg.vocab_size, 61), y = tokens(B * T, cfg.vocab_size, 62);
      losses.push_back(m.forward(x.data(), y.data(), B, T));
      m.backward(g);
      grads.push_back(grads_f32(g, prec));
    }
    CHECK(losses[1] == losses[0]);
    CHECK(losses[2] == losses[0]);
    GPT2 probe(cfg, ModelOptions{prec});
    const double bar = prec == Precision::fp32 ? 1e-5 : 3e-2;
    for (const ParamTensor& t : probe.layout().tensors) {
      INFO(t.name);
      double num = 0, den = 0;
      for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
        const double d = double(grads[1][i]) - grads[0][i];
        num += d * d;
        den += double(grads[0][i]) * grads[0][i];
      }
      CHECK(std::sqrt(num) <= bar * std::sqrt(den) + 1e-12);
      REQUIRE(std::memcmp(grads[2].data() + t.offset, grads[1].data() + t.offset, t.numel * 4) == 0);
    }
    ModelOptions flash{prec};
    flash.attention = Attention::flash;
    const size_t per_layer_saved = size_t(B) * cfg.num_heads * T * (T * precision_bytes(prec) - sizeof(float));
    CHECK(GPT2::activation_bytes(cfg, ModelOptions{prec}, B, T) - GPT2::activation_bytes(cfg, flash, B, T) >=
          cfg.num_layers * per_layer_saved);
  }
}
