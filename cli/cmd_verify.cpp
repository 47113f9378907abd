// cli/cmd_verify.cpp: `ringzero verify`, llm.c's test_gpt2 as a subcommand.
//
// Loads a model (an llm.c model file, a checkpoint or hf:DIR) and a reference state (a batch
// with the reference's logits, loss and gradients): for GPT-2 llm.c's debug-state file (e.g.
// from llm.c's train_gpt2.py), for Llama a safetensors file with Hugging Face names
// (model/reference_state.h; tests/fixtures/hf_llama_tiny/make_fixture.py makes one with
// transformers). It runs one forward and backward on that batch and compares tensor by tensor. An element passes when
// |ours - reference| <= atol + rtol * |reference|. The defaults are llm.c's CPU bars for
// fp32 (logits and loss 1e-2, gradients 2e-2); bf16 gets wider ones. The table's "max rel"
// is the largest difference divided by the tensor's largest reference magnitude.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "model/llmc_file.h"
#include "model/gpt2.h"
#include "model/reference_state.h"
#include "model/safetensors.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "train/config.h"
#include "train/model_source.h"
#include "train/rank_setup.h"

namespace rz {
namespace {

struct Tolerance {
  double atol, rtol;
};

struct Row {
  std::string name;
  double max_abs = 0, max_rel = 0;
  bool ok = true;
};

Row compare(const std::string& name, const float* ours, const float* ref, size_t n, Tolerance tol) {
  Row r;
  r.name = name;
  double ref_max = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::abs(double(ours[i]) - double(ref[i]));
    if (!(d <= tol.atol + tol.rtol * std::abs(double(ref[i])))) r.ok = false;  // NaN fails too
    if (!(d <= r.max_abs)) r.max_abs = d;
    ref_max = std::max(ref_max, std::abs(double(ref[i])));
  }
  r.max_rel = ref_max > 0 ? r.max_abs / ref_max : (r.max_abs > 0 ? INFINITY : 0.0);
  return r;
}

int run_verify(int argc, char** argv) {
  std::string model_path, state_path;
  TrainConfig settings;  // --precision and --device: rows of train's settings table
  double logits_atol = -1, loss_atol = -1, grads_atol = -1, rtol = -1;
  bool quiet = false;
  CLI::App app{
      "Check ringzero's model against a reference: load a model (--model) and a reference state\n"
      "(--state: a batch with the reference's logits, loss and gradients; GPT-2: llm.c's debug-state\n"
      "file; Llama: a safetensors file with inputs, targets, logits, loss and grad.<Hugging Face\n"
      "name>, docs/model.md), run one forward and backward on that batch, and print for logits,\n"
      "loss and every gradient tensor the\n"
      "max abs diff, the max diff relative to the tensor's largest reference value, and ok. An element\n"
      "passes when |ours - ref| <= atol + rtol * |ref|. Exits 0 only if everything passes.\n"
      "Default tolerances: fp32 logits 1e-2, loss 1e-2, gradients 2e-2, rtol 0 (llm.c's test_gpt2 bars);\n"
      "bf16 logits 0.25, loss 0.05, gradients 2e-2 with rtol 0.05.",
      "ringzero verify"};
  app.add_option("--model", model_path, std::string("the model: ") + kModelSourceHelp)->required();
  app.add_option("--state", state_path,
                 "llm.c debug-state file (magic 20240327, version 2; GPT-2), or a safetensors reference (Llama)")
      ->required();
  add_setting_flags(app, settings, {"precision", "device"});
  add_number(app, "--logits-atol", logits_atol, "absolute tolerance for logits (default by precision)");
  add_number(app, "--loss-atol", loss_atol, "absolute tolerance for the loss (default by precision)");
  add_number(app, "--grads-atol", grads_atol, "absolute tolerance for gradients (default by precision)");
  add_number(app, "--rtol", rtol, "relative tolerance for gradients and logits (default by precision)");
  app.add_flag("--quiet", quiet, "print only failing rows and the summary");
  if (!parse_command_line(app, argc, argv)) return 0;
  const Precision prec = settings.precision();
  const bool bf = prec == Precision::bf16;
  if (logits_atol < 0) logits_atol = bf ? 0.25 : 1e-2;
  if (loss_atol < 0) loss_atol = bf ? 0.05 : 1e-2;
  if (grads_atol < 0) grads_atol = 2e-2;
  if (rtol < 0) rtol = bf ? 0.05 : 0.0;

  ModelFile mf;
  mf.params = read_model_source_params(parse_model_source(model_path), &mf.cfg);
  const GPT2Config& cfg = mf.cfg;
  DebugState st = is_safetensors_file(state_path) ? read_reference_state(state_path, cfg)
                                                  : read_debug_state(state_path, cfg);
  std::printf("verify: model %s (%s), batch B=%d T=%d, compute %s\n", model_path.c_str(), describe_shape(cfg).c_str(),
              st.B, st.T, precision_name(prec));

  ModelOptions mo;
  mo.precision = prec;
  const RankPlacement at = place_rank(settings.device, RankEnv{}, CommBackend::ring);  // one process
  mo.device = at.device;
  mo.backend = at.backend;
  GPT2 model(cfg, mo);
  model.set_params_f32(mf.params.data());
  const float loss = model.forward(st.x.data(), st.y.data(), st.B, st.T);
  std::vector<float> logits_p, logits;
  model.logits_f32(logits_p);
  const size_t N = size_t(st.B) * st.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  logits.resize(N * V);
  for (size_t n = 0; n < N; ++n)
    std::copy(logits_p.begin() + n * Vp, logits_p.begin() + n * Vp + V, logits.begin() + n * V);
  FullGradSink sink(model.layout().total, prec, model.backend());
  model.backward(sink, 1.0f);
  std::vector<float> grads(model.layout().total);
  sink.get_f32(grads.data());

  std::vector<Row> rows;
  rows.push_back(compare("logits", logits.data(), st.logits.data(), logits.size(), {logits_atol, rtol}));
  rows.push_back(compare("loss", &loss, &st.loss, 1, {loss_atol, 0.0}));
  // gradient tensors in llm.c's order: wte, wpe, then each kind over layers 0..L-1, lnf
  const ParamLayout& lay = model.layout();
  for (int k = 0; k < kNumParamKinds; ++k)
    for (int l = -1; l < cfg.num_layers; ++l)
      for (const ParamTensor& t : lay.tensors)
        if (int(t.kind) == k && t.layer == l)
          rows.push_back(compare("d" + t.name, grads.data() + t.offset, st.grads.data() + t.offset, t.numel,
                                 {grads_atol, rtol}));

  int failed = 0;
  std::printf("%-16s %14s %14s  %s\n", "tensor", "max abs diff", "max rel diff", "ok");
  for (const Row& r : rows) {
    failed += r.ok ? 0 : 1;
    if (!quiet || !r.ok)
      std::printf("%-16s %14.3e %14.3e  %s\n", r.name.c_str(), r.max_abs, r.max_rel, r.ok ? "ok" : "FAIL");
  }
  double worst_abs = 0, worst_rel = 0;
  for (const Row& r : rows) {
    worst_abs = std::max(worst_abs, r.max_abs);
    worst_rel = std::max(worst_rel, r.max_rel);
  }
  std::printf("verify: loss ours %.6f reference %.6f; worst max abs diff %.3e, worst max rel diff %.3e\n", loss,
              st.loss, worst_abs, worst_rel);
  if (failed) {
    std::printf("verify: FAILED: %d of %zu tensors outside tolerance\n", failed, rows.size());
    return 1;
  }
  std::printf("verify: OK: all %zu tensors within tolerance\n", rows.size());
  return 0;
}

const RegisterCommand kRegister{Command{"verify", "check forward/backward against an llm.c debug-state file",
                                        run_verify, 60}};

}  // namespace
}  // namespace rz
