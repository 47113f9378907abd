// The llama family (model/family.h, model/model.cpp, model/hf_llama.h) against transformers:
//   - tests/fixtures/hf_llama_tiny (its script made it with LlamaForCausalLM: GQA 4/2, an untied
//     lm_head, theta 5000) imports, and one forward and backward on its reference batch gives
//     transformers' logits, loss and every gradient, tensor by tensor by tests/gpu_compare.h's
//     rule; the same in every recompute and attention mode;
//   - q_proj and k_proj load as they are: the interleaved rotary layout instead misses the
//     reference by far, so the half-split form is proven, not assumed;
//   - greedy tokens from both fixture models (MQA tied, GQA untied) are transformers' greedy
//     generate()'s, through the KV cache and without it;
//   - the layout: SmolLM2-135M's parameter count, gradient-ready order, units, no biases;
//   - export and import round-trip bitwise, the streaming writer equals the whole-array one;
//   - config.json and weight files that do not describe what ringzero computes are refused in
//     one line, and so are the GPT-2-only formats given a Llama;
//   - on the simulated device the numbers and greedy tokens are the CPU's bitwise.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/memory.h"
#include "kernels/registry/device_registry.h"
#include "model/hf_dir.h"
#include "model/hf_gpt2.h"
#include "model/hf_llama.h"
#include "model/hf_model.h"
#include "model/layout.h"
#include "model/llmc_file.h"
#include "model/model.h"
#include "model/reference_state.h"
#include "model/safetensors.h"
#include "model/saved_model.h"
#include "tests/gpu_compare.h"
#include "tests/test_paths.h"
#include "train/generate.h"

using namespace rz;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const char* sub = "") { return fs::path(RINGZERO_SOURCE_DIR) / "tests/fixtures/hf_llama_tiny" / sub; }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("rz_llama_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path sub(const std::string& name) const {
    const fs::path p = path / name;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the rz::Error fn throws ("" when it throws none), checked to be one line.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);
    return m;
  }
  return "";
}

std::vector<float> import_dir(const fs::path& dir, ModelConfig* cfg = nullptr) {
  const HfModelDir d = inspect_hf_model(dir.string());
  std::vector<float> p(num_parameters(d.cfg), -1.0f);
  read_hf_model(dir.string(), [&](size_t b, const float* x, size_t n) { std::copy(x, x + n, p.begin() + b); });
  if (cfg) *cfg = d.cfg;
  return p;
}

// An element passes when |x - ref| <= atol * rms(ref) + rtol * |ref| (tests/gpu_compare.h).
// ringzero in fp32 against transformers in float64: these bounds hold the fixture with a
// wide margin (the largest misses are printed by the test) and are far below what a
// mapping or formula error gives (the interleaved-rope case below misses by 100x them).
constexpr test::Tol kTol{1e-4, 1e-4};

struct Comparison {
  size_t bad = 0;
  double worst = 0;  // max |x - ref| / (atol rms + rtol |ref|) over the tensor
};
Comparison compare(const float* got, const float* ref, size_t n, test::Tol t) {
  std::vector<float> g(got, got + n), r(ref, ref + n);
  const test::Outside o = test::outside_tolerance(g, r, t);
  Comparison c;
  c.bad = o.bad;
  for (size_t i = 0; i < n; ++i) {
    const double bound = t.atol * o.rms + t.rtol * std::fabs(double(ref[i]));
    c.worst = std::max(c.worst, std::fabs(double(got[i]) - ref[i]) / bound);
  }
  return c;
}

struct Pass {
  float loss = 0;
  std::vector<float> logits, grads;  // logits (N, V) unpadded; grads: layout order
};
Pass run_reference_batch(const ModelConfig& cfg, const std::vector<float>& params, const DebugState& st,
                         ModelOptions mo = {}) {
  Model model(cfg, mo);
  model.set_params_f32(params.data());
  Pass p;
  p.loss = model.forward(st.x.data(), st.y.data(), st.B, st.T);
  std::vector<float> padded;
  model.logits_f32(padded);
  const size_t N = size_t(st.B) * st.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  for (size_t n = 0; n < N; ++n) p.logits.insert(p.logits.end(), padded.begin() + n * Vp, padded.begin() + n * Vp + V);
  FullGradSink sink(model.layout().total, mo.precision, model.backend());
  model.backward(sink, 1.0f);
  p.grads.resize(model.layout().total);
  sink.get_f32(p.grads.data());
  return p;
}

// Every tensor of a pass within kTol of the reference (or, with expect_bad, not).
size_t tensors_outside(const ModelConfig& cfg, const Pass& p, const DebugState& st, bool print) {
  size_t bad = 0;
  const Comparison lc = compare(p.logits.data(), st.logits.data(), p.logits.size(), kTol);
  if (print) std::printf("  logits: worst %.3f of the bound\n", lc.worst);
  bad += lc.bad > 0;
  bad += std::fabs(p.loss - st.loss) > kTol.rtol * std::fabs(st.loss);
  for (const ParamTensor& t : build_param_layout(cfg).tensors) {
    const Comparison c = compare(p.grads.data() + t.offset, st.grads.data() + t.offset, t.numel, kTol);
    if (print) std::printf("  d%s: worst %.3f of the bound\n", t.name.c_str(), c.worst);
    bad += c.bad > 0;
  }
  return bad;
}

}  // namespace

TEST_CASE("llama layout: SmolLM2-135M's parameter count, gradient-ready order, no biases") {
  const ModelConfig smol = model_preset("smollm2-135m");
  CHECK(smol.family == ModelFamily::llama);
  CHECK(num_parameters(smol) == 134515008);  // HuggingFaceTB/SmolLM2-135M: 134,515,008 (tied)
  CHECK(smol.num_kv_heads == 3);
  CHECK(smol.qkv_width() == 576 + 2 * 192);

  ModelConfig c = model_preset("llama-tiny");
  c.tied = false;
  const ParamLayout lay = build_param_layout(c);
  // lmhead first (finished by the classifier's backward), wte last; one tensor per unit.
  CHECK(lay.tensors.front().kind == ParamKind::lmhead);
  CHECK(lay.tensors[1].kind == ParamKind::lnfw);
  CHECK(lay.tensors.back().kind == ParamKind::wte);
  CHECK(lay.find_if(ParamKind::wpe) == nullptr);
  for (ParamKind k : {ParamKind::qkvb, ParamKind::attprojb, ParamKind::fcb, ParamKind::fcprojb, ParamKind::ln1b,
                      ParamKind::lnfb})
    CHECK(lay.find_if(k, k == ParamKind::lnfb ? -1 : 0) == nullptr);
  CHECK(lay.grad_units.size() == lay.tensors.size());
  CHECK(lay.find(ParamKind::qkvw, 1).shape == std::vector<size_t>{64 + 2 * 32, 64});
  CHECK(lay.find(ParamKind::fcw, 1).shape == std::vector<size_t>{2 * 192, 64});
  CHECK(lay.find(ParamKind::fcprojw, 1).shape == std::vector<size_t>{64, 192});
  // ZeRO-3's units: the untied head sits with lnf at the model's end.
  const auto units = param_unit_ranges(lay, c.num_layers);
  CHECK(units[c.num_layers] == std::make_pair(size_t{0}, lay.find(ParamKind::lnfw).offset + 64));
  CHECK(units[c.num_layers + 1] == std::make_pair(lay.find(ParamKind::wte).offset, lay.total));
}

TEST_CASE("the transformers fixture: logits, loss and every gradient, tensor by tensor") {
  ModelConfig cfg;
  const std::vector<float> params = import_dir(fixture("untied"), &cfg);
  CHECK(cfg.num_kv_heads == 2);
  CHECK(!cfg.tied);
  CHECK(cfg.rope_theta == 5000.0);
  const DebugState st = read_reference_state(fixture("reference.safetensors").string(), cfg);
  REQUIRE(st.B == 2);
  REQUIRE(st.T == 16);
  const Pass p = run_reference_batch(cfg, params, st);
  std::printf("llama fixture: loss ours %.6f, transformers %.6f\n", p.loss, st.loss);
  CHECK(tensors_outside(cfg, p, st, true) == 0);

  // Every recompute mode is bitwise the same; flash attention within the same bound.
  for (Recompute r : {Recompute::gelu, Recompute::layer}) {
    ModelOptions mo;
    mo.recompute = r;
    const Pass q = run_reference_batch(cfg, params, st, mo);
    INFO("recompute " << recompute_name(r));
    CHECK(std::memcmp(q.grads.data(), p.grads.data(), p.grads.size() * sizeof(float)) == 0);
    CHECK(q.loss == p.loss);
  }
  ModelOptions fl;
  fl.attention = Attention::flash;
  const Pass f = run_reference_batch(cfg, params, st, fl);
  CHECK(f.loss == p.loss);
  CHECK(tensors_outside(cfg, f, st, false) == 0);

  // bf16 storage: within bf16's rounding of the reference (gpu_compare's bf16 tolerance, on
  // the loss and logits; the gradients of a bf16 model go through bf16 activations).
  ModelOptions b;
  b.precision = Precision::bf16;
  const Pass h = run_reference_batch(cfg, params, st, b);
  CHECK(std::fabs(h.loss - st.loss) < 0.05 * st.loss);
}

TEST_CASE("q_proj and k_proj load as they are: the interleaved rotary layout misses transformers by far") {
  ModelConfig cfg;
  std::vector<float> params = import_dir(fixture("untied"), &cfg);
  const DebugState st = read_reference_state(fixture("reference.safetensors").string(), cfg);
  // Meta's checkpoints keep each head's rotary pairs interleaved, (2i, 2i + 1); transformers'
  // conversion permutes q and k rows into the half-split (i, i + hs/2) that rotate_half
  // rotates. Undo that permutation: if ringzero's rope were the interleaved kind, this would be
  // the layout that matches.
  const int hs = cfg.head_size(), C = cfg.channels, KV = cfg.num_kv_heads * hs;
  const ParamLayout lay = build_param_layout(cfg);
  for (int l = 0; l < cfg.num_layers; ++l) {
    float* w = params.data() + lay.find(ParamKind::qkvw, l).offset;
    for (int block_rows : {C, KV}) {
      float* rows = block_rows == C ? w : w + size_t(C) * C;
      std::vector<float> copy(rows, rows + size_t(block_rows) * C);
      for (int h = 0; h < block_rows / hs; ++h)
        for (int i = 0; i < hs / 2; ++i)
          for (int half = 0; half < 2; ++half)
            std::copy_n(copy.data() + size_t(h * hs + half * hs / 2 + i) * C, C,
                        rows + size_t(h * hs + 2 * i + half) * C);
    }
  }
  const Pass p = run_reference_batch(cfg, params, st);
  CHECK(tensors_outside(cfg, p, st, false) > 10);
  CHECK(std::fabs(p.loss - st.loss) > 0.1);
}

TEST_CASE("greedy tokens are transformers' greedy generate(), with and without the KV cache") {
  const nlohmann::json j = nlohmann::json::parse(slurp(fixture("tokens.json")));
  const std::vector<int> prompt = j["prompt"].get<std::vector<int>>();
  for (const char* sub : {"tied", "untied"}) {
    INFO(sub);
    ModelConfig cfg;
    const std::vector<float> params = import_dir(fixture(sub), &cfg);
    const std::vector<int> want = j["greedy"][sub].get<std::vector<int>>();
    Model model(cfg, ModelOptions{});
    model.set_params_f32(params.data());
    SampleRng rng{1};
    const std::vector<int> cached = generate_tokens(model, prompt, int(want.size()), cfg.max_seq_len, cfg.vocab_size,
                                                    0.0f, 0, rng);
    CHECK(std::vector<int>(cached.begin() + long(prompt.size()), cached.end()) == want);
    // Without the cache: one forward over prompt + continuation; each position's argmax is
    // the next greedy token.
    std::vector<int> seq = prompt;
    seq.insert(seq.end(), want.begin(), want.end());
    model.forward(seq.data(), nullptr, 1, int(seq.size()) - 1);
    std::vector<float> logits;
    model.logits_f32(logits);
    for (size_t i = 0; i < want.size(); ++i) {
      const float* row = logits.data() + (prompt.size() - 1 + i) * size_t(cfg.padded_vocab_size);
      CHECK(std::max_element(row, row + cfg.vocab_size) - row == want[i]);
    }
    // The KV cache holds NKV heads per layer: MQA's (tied) is 1 of the 4 query heads' width.
    const size_t before = MemoryTracker::global().current(MemTag::activations);
    model.reserve_kv_cache(8);
    CHECK(MemoryTracker::global().current(MemTag::activations) - before ==
          size_t(2) * cfg.num_layers * 8 * cfg.num_kv_heads * cfg.head_size() * sizeof(float));
    model.release_kv_cache();
  }
}

TEST_CASE("export and import of a Llama round-trip bitwise; the streaming writer writes the same file") {
  TempDir tmp;
  ModelConfig cfg;
  const std::vector<float> params = import_dir(fixture("untied"), &cfg);
  const fs::path a = tmp.sub("a");
  write_hf_model(a.string(), cfg, Precision::fp32, params.data(), false);
  ModelConfig back;
  const std::vector<float> again = import_dir(a, &back);
  CHECK(std::memcmp(again.data(), params.data(), params.size() * sizeof(float)) == 0);
  CHECK(describe_shape(back) == describe_shape(cfg));
  // The tensors are transformers' own, bit for bit (the writer's order is its own).
  const SafetensorsFile ours((a / "model.safetensors").string()), theirs(fixture("untied/model.safetensors").string());
  REQUIRE(ours.tensors().size() == theirs.tensors().size());
  for (const SafeTensorInfo& t : theirs.tensors()) {
    const SafeTensorInfo* o = ours.find(t.name);
    REQUIRE(o != nullptr);
    std::vector<float> x(t.numel), y(t.numel);
    theirs.read_f32(t, 0, x.size(), x.data());
    ours.read_f32(*o, 0, y.size(), y.data());
    CHECK(x == y);
  }
  // Chunks in reverse order and odd sizes, as zero3 gathers units: the same bytes.
  const fs::path b = tmp.sub("b");
  {
    const std::unique_ptr<SavedModelWriter> w = make_saved_model_writer(b.string(), cfg, Precision::fp32);
    const size_t chunk = 777;
    for (size_t end = params.size(); end > 0;) {
      const size_t begin = end > chunk ? end - chunk : 0;
      w->write(begin, params.data() + begin, end - begin);
      end = begin;
    }
    w->commit();
  }
  CHECK(slurp(b / "model.safetensors") == slurp(a / "model.safetensors"));
  CHECK(check_saved_model(b.string()).num_layers == cfg.num_layers);
  // bf16: rounded to nearest even, read back exactly those values.
  const fs::path c = tmp.sub("c");
  write_hf_model(c.string(), cfg, Precision::bf16, params.data(), false);
  const std::vector<float> rounded = import_dir(c);
  for (size_t i = 0; i < params.size(); i += 97) CHECK(rounded[i] == bf16_to_float(float_to_bf16(params[i])));
  CHECK(nlohmann::json::parse(slurp(c / "config.json"))["torch_dtype"] == "bfloat16");
}

TEST_CASE("config.json and weights that do not describe ringzero's Llama are refused in one line") {
  TempDir tmp;
  const std::string base = slurp(fixture("untied/config.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = nlohmann::json::parse(base);
    edit(c);
    return error_of([&] { parse_hf_llama_config(c.dump(), "config.json"); });
  };
  CHECK(with([](nlohmann::json&) {}).empty());
  CHECK(with([](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; })
            .find("rope_type 'llama3'") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; })
            .find("rope_scaling") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["hidden_act"] = "gelu"; }).find("hidden_act 'gelu'") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["attention_bias"] = true; }).find("attention_bias") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["mlp_bias"] = true; }).find("mlp_bias") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["head_dim"] = 16; }).find("head_dim 16") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["num_key_value_heads"] = 3; }).find("multiple of kv_heads") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["model_type"] = "mistral"; }).find("model_type 'mistral'") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["architectures"] = {"LlamaModel"}; }).find("LlamaModel") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["pretraining_tp"] = 2; }).find("pretraining_tp 2") != std::string::npos);
  CHECK(with([](nlohmann::json& c) { c["rms_norm_eps"] = "small"; }).find("rms_norm_eps") != std::string::npos);
  // Older files: rope_theta at the top and rope_scaling null read the same.
  CHECK(with([](nlohmann::json& c) {
          c.erase("rope_parameters");
          c["rope_theta"] = 5000.0;
          c["rope_scaling"] = nullptr;
        }).empty());

  // Weight files: a missing lm_head for an untied config, a wrong shape, an unknown tensor,
  // and a tied config whose lm_head is not embed_tokens.
  ModelConfig cfg;
  const std::vector<float> params = import_dir(fixture("untied"), &cfg);
  const fs::path d = tmp.sub("d");
  write_hf_model(d.string(), cfg, Precision::fp32, params.data(), false);
  nlohmann::json c = nlohmann::json::parse(slurp(d / "config.json"));
  c["intermediate_size"] = 64;
  spit(d / "config.json", c.dump());
  CHECK(error_of([&] { import_dir(d); }).find("down_proj.weight' has shape [32, 96], but config.json") !=
        std::string::npos);
  c["intermediate_size"] = 96;
  c["tie_word_embeddings"] = true;
  spit(d / "config.json", c.dump());
  const std::string tied_error = error_of([&] { import_dir(d); });
  INFO(tied_error);
  CHECK(tied_error.find("lm_head.weight differs from model.embed_tokens.weight") != std::string::npos);
  ModelConfig tied_cfg = cfg;
  tied_cfg.tied = true;
  const fs::path t = tmp.sub("t");
  std::vector<float> tied_params(num_parameters(tied_cfg));
  const ParamLayout lay = build_param_layout(cfg);
  std::copy(params.begin() + long(lay.find(ParamKind::lnfw).offset), params.end(), tied_params.begin());
  write_hf_model(t.string(), tied_cfg, Precision::fp32, tied_params.data(), false);
  nlohmann::json tc = nlohmann::json::parse(slurp(t / "config.json"));
  tc["tie_word_embeddings"] = false;
  spit(t / "config.json", tc.dump());
  CHECK(error_of([&] { import_dir(t); }).find("tensor 'lm_head.weight' is missing") != std::string::npos);

  // The GPT-2-only formats: llm.c's writer, and its reader given model.safetensors.
  CHECK(error_of([&] { write_model_file((tmp.path / "m.bin").string(), cfg, Precision::fp32, params.data()); })
            .find("llm.c's model and debug-state files hold GPT-2 only") != std::string::npos);
  CHECK(!fs::exists(tmp.path / "m.bin"));
  CHECK(error_of([&] { read_model_header((d / "model.safetensors").string()); })
            .find("a safetensors file (a Hugging Face model's weights), not an llm.c model file") != std::string::npos);
  // A GPT-2 reader given a Llama directory names the model_type.
  CHECK(error_of([&] { parse_hf_gpt2_config(slurp(fixture("untied/config.json")), "config.json"); })
            .find("model_type 'llama' is not GPT-2") != std::string::npos);
}

TEST_CASE("llama shapes: presets, overrides and the keys a family does not have") {
  const ModelConfig t = model_preset("llama-tiny");
  CHECK(t.num_kv_heads == 2);
  CHECK(t.intermediate == default_intermediate(64));
  CHECK(default_intermediate(128) == 384);
  CHECK(default_intermediate(576) == 1536);
  // A GPT-2 preset as a llama: the same L, C, NH, V and maxT; Llama's defaults for the rest.
  ModelConfig l = override_shape(model_preset("d4"), {.family = "llama"});
  finalize_config(l);
  CHECK(l.family == ModelFamily::llama);
  CHECK(l.num_layers == 4);
  CHECK(l.num_kv_heads == l.num_heads);
  CHECK(l.intermediate == default_intermediate(256));
  CHECK(l.rope_theta == 10000.0);
  // New heads keep the preset's group size where they can.
  ModelConfig h = override_shape(model_preset("llama-tiny"), {.heads = 8});
  finalize_config(h);
  CHECK(h.num_kv_heads == 4);
  ModelConfig mqa = override_shape(model_preset("llama-tiny"), {.kv_heads = 1});
  finalize_config(mqa);
  CHECK(mqa.num_kv_heads == 1);
  CHECK(error_of([] { override_shape(model_preset("tiny"), {.kv_heads = 2}); }).find("kv_heads: 2, but the gpt2 family") !=
        std::string::npos);
  CHECK(error_of([] { override_shape(model_preset("tiny"), {.rope_theta = 5e5}); }).find("rope_theta") !=
        std::string::npos);
  CHECK(error_of([] { override_shape(model_preset("tiny"), {.classifier = "untied"}); }).find("classifier: untied") !=
        std::string::npos);
  CHECK(error_of([] { override_shape(model_preset("tiny"), {.intermediate = 100}); }).find("intermediate: 100") !=
        std::string::npos);
  CHECK(error_of([] {
          ModelConfig odd = override_shape(model_preset("llama-tiny"), {.channels = 60, .heads = 4});
          finalize_config(odd);
        }).find("is odd") != std::string::npos);
}

// The simulated device (kernels/sim): its ops are the CPU's over memory host code cannot
// touch, so a host/device mix-up in the family's code paths (the zero position rows, the
// rope-then-scatter of the cached forward, the untied head) fails here as on a GPU, and the
// numbers must be the CPU's bitwise.
TEST_CASE("the llama model on the simulated device: the CPU's bits, the KV cache included", "[sim]") {
  ModelConfig cfg;
  const std::vector<float> params = import_dir(fixture("untied"), &cfg);
  const DebugState st = read_reference_state(fixture("reference.safetensors").string(), cfg);
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (Attention att : {Attention::materialized, Attention::flash})
      for (Recompute rc : {Recompute::none, Recompute::layer}) {
        CAPTURE(precision_name(p), attention_name(att), recompute_name(rc));
        ModelOptions mo(p, rc);
        mo.attention = att;
        const Pass cpu = run_reference_batch(cfg, params, st, mo);
        mo.device = Device{DeviceKind::sim, 0};
        mo.backend = make_backend(mo.device);
        const Pass sim = run_reference_batch(cfg, params, st, mo);
        CHECK(sim.loss == cpu.loss);
        CHECK(std::memcmp(sim.grads.data(), cpu.grads.data(), cpu.grads.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(sim.logits.data(), cpu.logits.data(), cpu.logits.size() * sizeof(float)) == 0);
      }
  const nlohmann::json j = nlohmann::json::parse(slurp(fixture("tokens.json")));
  ModelOptions mo;
  mo.device = Device{DeviceKind::sim, 0};
  mo.backend = make_backend(mo.device);
  Model model(cfg, mo);
  model.set_params_f32(params.data());
  SampleRng rng{1};
  const std::vector<int> prompt = j["prompt"].get<std::vector<int>>(), want = j["greedy"]["untied"].get<std::vector<int>>();
  const std::vector<int> got = generate_tokens(model, prompt, int(want.size()), cfg.max_seq_len, cfg.vocab_size, 0.0f, 0, rng);
  CHECK(std::vector<int>(got.begin() + long(prompt.size()), got.end()) == want);
}
