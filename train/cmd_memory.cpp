// train/cmd_memory.cpp: `ringzero memory` -- bytes per rank for ddp / zero1 / zero2 without
// running anything.
//
// Two sources of a model size:
//   --params P             a bare parameter count: model states only (the ZeRO paper's and
//                          the seed article's tables; docs/comm.md), from the bytes/param formulas;
//   --model / --layers ... a GPT-2 shape: the real parameter layout, so the model states are
//                          the exact bytes ringzero allocates (bucket padding included), plus
//                          zero2's staging buckets and the activations for (--batch, --seq).
// The formulas are in zero/memory_formula.h; GB here are decimal (1e9 bytes), as the seed
// article counts them (7B x 16 bytes = 112 GB).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "model/layout.h"
#include "train/command.h"
#include "zero/buckets.h"
#include "zero/memory_formula.h"
#include "zero/strategy.h"

namespace rz {
namespace {

struct MemoryArgs {
  std::string model;
  int layers = 0, channels = 0, heads = 0, vocab = 0, seq = 0;
  int batch = 1;
  double params = 0.0;
  std::vector<int> nranks;
  std::string precision = "bf16";
  std::string strategy = "all";
  double bucket_mb = StrategyOptions{}.bucket_mb;
  int buckets_in_flight = StrategyOptions{}.buckets_in_flight;
  bool json = false;
};

struct Row {
  StrategyKind kind;
  int nranks;
  PerParamBytes paper, ringzero;
  double states_paper = 0, states = 0;  // bytes per rank
  double states_fp32_shard = 0;         // zero2 with --grad-shard-fp32 (fp32 owned gradient shard)
  double staging = -1, activations = -1;  // -1: unknown (bare parameter count)
  int staging_buffers = 0;                // zero2: general staging buffers (besides wte's)
  ExactStateBytes exact = {};             // per tag (shape given); else from the per-param formula
  double gathered = 0;                    // zero3: gathered parameter units in flight (shape given)
  double total() const { return states + gathered + std::max(0.0, staging) + std::max(0.0, activations); }
};

std::string dec_bytes(double b) {
  if (b >= 1e10) return strfmt("%.1f GB", b / 1e9);  // 112.0, 31.4, 16.6: one decimal, as the seed article prints them
  if (b >= 1e9) return strfmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return strfmt("%.2f MB", b / 1e6);
  if (b >= 1e3) return strfmt("%.2f KB", b / 1e3);
  return strfmt("%.0f B", b);
}

std::string formula_text(StrategyKind k, Precision p, bool paper) {
  const bool bf = p == Precision::bf16;
  const char* pb = bf ? "2" : "4";
  const char* opt = bf ? "12" : "8";
  switch (k) {
    case StrategyKind::ddp: return strfmt("%s+%s+%s", pb, pb, opt);
    case StrategyKind::zero1: return strfmt("%s+%s+%s/N", pb, pb, opt);
    case StrategyKind::zero2: return strfmt("%s+%s/N+%s/N", pb, paper ? pb : "4", opt);
    case StrategyKind::zero3: return strfmt("(%s+%s+%s)/N", pb, pb, opt);
  }
  return "?";
}

int run_memory(int argc, char** argv) {
  MemoryArgs a;
  CLI::App app{
      "Bytes per rank of model states (params + grads + AdamW states) for ddp, zero1, zero2, zero3,\n"
      "computed from formulas without running anything. GB = 1e9 bytes.\n"
      "  bf16 mode: bf16 params and grads, fp32 master weights, m and v:\n"
      "    ddp 2+2+12 = 16 B/param (7B -> 112 GB), zero1 2+2+12/N, zero2 2+2/N+12/N, zero3 16/N (ZeRO paper).\n"
      "  fp32 mode: the fp32 params ARE the master weights (no extra copy), so\n"
      "    ddp 4+4+8 = 16 B/param, zero1 4+4+8/N, zero2 4+4/N+8/N, zero3 16/N.\n"
      "zero3 also holds its gathered parameter units in flight (two layers + the embeddings) and zero2's staging.\n"
      "ringzero's zero2 keeps its owned gradient shard in the model's precision as the paper does\n"
      "(train --grad-shard-fp32 keeps it in fp32: 4/N) and holds staging buckets\n"
      "(--buckets-in-flight buffers sized like the largest buckets + one reserved for the bucket\n"
      "holding the tied wte); both are shown in their own rows. With --params only the model states are known;\n"
      "with a model shape (--model or --layers/--channels/...) the exact allocation (bucket\n"
      "padding included), the staging buckets and the activations for --batch x --seq are added.",
      "ringzero memory"};
  app.add_option("--model", a.model, "preset: tiny, d2, d4, d6, d12, d24, d36, d48");
  app.add_option("--layers", a.layers, "L (overrides the preset; default preset d12)")->check(CLI::PositiveNumber);
  app.add_option("--channels", a.channels, "C")->check(CLI::PositiveNumber);
  app.add_option("--heads", a.heads, "NH")->check(CLI::PositiveNumber);
  app.add_option("--vocab", a.vocab, "V")->check(CLI::PositiveNumber);
  app.add_option("--seq", a.seq, "T: sequence length of the activations and rows of wpe (default the model's maxT)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", a.batch, "B: micro-batch size per rank for the activations")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--params", a.params, "a bare parameter count such as 7e9 (model states only)");
  app.add_option("--nranks", a.nranks, "number of ranks N (repeatable; default 1 2 4 8 64)")
      ->check(CLI::Range(1, 1 << 20));
  std::vector<std::string> strategy_choices = strategy_names();
  strategy_choices.emplace_back("all");
  app.add_option("--precision", a.precision, "bf16 (mixed precision) or fp32")
      ->check(CLI::IsMember(precision_names()))->capture_default_str();
  app.add_option("--strategy", a.strategy, "a strategy or all")
      ->check(CLI::IsMember(strategy_choices))->capture_default_str();
  app.add_option("--bucket-mb", a.bucket_mb, "gradient bucket size in MiB (zero2 staging)")->capture_default_str();
  app.add_option("--buckets-in-flight", a.buckets_in_flight, "zero2 staging buffers besides wte's")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_flag("--json", a.json, "print one JSON object instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const bool shape = !a.model.empty() || a.layers || a.channels || a.heads || a.vocab || a.seq;
  RZ_CHECK(!(shape && a.params > 0), "--params: a bare parameter count cannot be combined with a model shape (--model, --layers, ...)");
  RZ_CHECK(shape || a.params > 0, "give a model: --model PRESET, --layers/--channels/--heads/--vocab/--seq, or --params COUNT");
  if (!shape)
    RZ_CHECK(std::isfinite(a.params) && a.params >= 1 && a.params <= 1e15,
             "--params: expected a count in [1, 1e15], got %g", a.params);
  if (a.nranks.empty()) a.nranks = {1, 2, 4, 8, 64};
  const Precision prec = parse_precision(a.precision);
  std::vector<StrategyKind> kinds;
  if (a.strategy == "all")
    kinds.assign(std::begin(kStrategyKinds), std::end(kStrategyKinds));
  else
    kinds = {parse_strategy(a.strategy)};

  GPT2Config cfg;
  ParamLayout layout;
  double P = a.params;
  int T = 0;
  if (shape) {
    cfg = model_preset(a.model.empty() ? "d12" : a.model);
    if (a.layers) cfg.num_layers = a.layers;
    if (a.channels) cfg.channels = a.channels;
    if (a.heads) cfg.num_heads = a.heads;
    if (a.vocab) cfg.vocab_size = a.vocab;
    if (a.seq) cfg.max_seq_len = a.seq;
    finalize_config(cfg);
    layout = build_param_layout(cfg);
    P = static_cast<double>(layout.total);
    T = cfg.max_seq_len;
  }
  ModelOptions mopts;
  mopts.precision = prec;
  const double act = shape ? static_cast<double>(GPT2::activation_bytes(cfg, mopts, a.batch, T)) : -1.0;

  std::vector<Row> rows;
  for (StrategyKind k : kinds) {
    for (int n : a.nranks) {
      Row r{k, n, paper_formula(k, prec, n), ringzero_formula(k, prec, n)};
      r.states_paper = P * r.paper.total();
      r.states = P * r.ringzero.total();
      r.states_fp32_shard = P * ringzero_formula(k, prec, n, true).total();
      if (shape) {
        // The plan and pools the strategy would build (zero/memory_formula.h).
        StagingPool pool;
        const ExactStateBytes e =
            predicted_state_bytes(layout, cfg.num_layers, k, prec, n, a.bucket_mb, a.buckets_in_flight, false, &pool);
        r.staging_buffers = pool.general;
        r.states = static_cast<double>(e.total() - e.staging - e.gathered);
        r.gathered = static_cast<double>(e.gathered);
        const ExactStateBytes f =
            predicted_state_bytes(layout, cfg.num_layers, k, prec, n, a.bucket_mb, a.buckets_in_flight, true);
        r.states_fp32_shard = static_cast<double>(f.total() - f.staging - f.gathered);
        r.exact = e;
        r.staging = static_cast<double>(e.staging);
        r.activations = act;
      }
      rows.push_back(r);
    }
  }

  if (a.json) {
    nlohmann::json j;
    j["precision"] = precision_name(prec);
    j["params"] = P;
    if (shape) {
      j["model"] = {{"layers", cfg.num_layers}, {"channels", cfg.channels}, {"heads", cfg.num_heads},
                    {"vocab", cfg.vocab_size}, {"padded_vocab", cfg.padded_vocab_size},
                    {"max_seq_len", cfg.max_seq_len}, {"batch", a.batch}};
    }
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json o{{"strategy", strategy_name(r.kind)},
                       {"nranks", r.nranks},
                       {"bytes_per_param_paper", r.paper.total()},
                       {"bytes_per_param", r.ringzero.total()},
                       {"model_states_paper_bytes", r.states_paper},
                       {"model_states_bytes", r.states + r.gathered},  // zero3: its params tag holds the gathered units
                       {"gathered_bytes", r.gathered},
                       {"model_states_grad_shard_fp32_bytes", r.states_fp32_shard}};
      // Bytes per tag as base/memory.h names them (comm: zero2's staging), for `ringzero plot memory`.
      auto tag = [&](size_t exact, double per_param) { return shape ? double(exact) : P * per_param; };
      o["bytes_by_tag"] = {{"params", tag(r.exact.params, r.ringzero.params)},
                           {"grads", tag(r.exact.grads, r.ringzero.grads)},
                           {"master", tag(r.exact.master, r.ringzero.master)},
                           {"adam_m", tag(r.exact.adam_m, r.ringzero.adam_m)},
                           {"adam_v", tag(r.exact.adam_v, r.ringzero.adam_v)},
                           {"comm", shape ? r.staging : 0.0},
                           {"activations", shape ? r.activations : 0.0}};
      if (shape) {
        o["staging_bytes"] = r.staging;
        o["activation_bytes"] = r.activations;
        o["total_bytes"] = r.total();
      }
      j["rows"].push_back(o);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  if (shape)
    std::printf("model: L=%d C=%d NH=%d V=%d (Vp %d) maxT=%d: %.0f parameters; %s; activations for B=%d T=%d\n",
                cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size, cfg.padded_vocab_size,
                cfg.max_seq_len, P, precision_name(prec), a.batch, T);
  else
    std::printf("model: %.3g parameters (--params: model states only); %s\n", P, precision_name(prec));
  std::printf("per-rank bytes, GB = 1e9 bytes; AdamW; %s\n\n",
              prec == Precision::fp32 ? "fp32 params are the master weights"
                                      : "bf16 params/grads + fp32 master, m, v");
  std::printf("%-7s %-28s", "", "bytes/param");
  for (int n : a.nranks) std::printf(" %11s", strfmt("N=%d", n).c_str());
  std::printf("\n");
  auto line = [&](const char* name, const std::string& label, StrategyKind k, auto value) {
    std::printf("%-7s %-28s", name, label.c_str());
    for (const Row& r : rows)
      if (r.kind == k) std::printf(" %11s", dec_bytes(value(r)).c_str());
    std::printf("\n");
  };
  for (StrategyKind k : kinds) {
    const char* name = strategy_name(k);
    line(name, "model states " + formula_text(k, prec, true), k,
         [](const Row& r) { return r.states_paper; });
    if (shape) line("", "ringzero exact (padding)", k, [](const Row& r) { return r.states; });
    if (k == StrategyKind::zero2 && prec == Precision::bf16)
      line("", "--grad-shard-fp32 " + formula_text(k, prec, false), k,
           [](const Row& r) { return r.states_fp32_shard; });
    if (shape) {
      if (k == StrategyKind::zero2 || k == StrategyKind::zero3) {
        const auto z = std::find_if(rows.begin(), rows.end(), [k](const Row& r) { return r.kind == k; });
        line("", strfmt("+ staging (%d+1 wte buckets)", z->staging_buffers), k, [](const Row& r) { return r.staging; });
      }
      if (k == StrategyKind::zero3)
        line("", strfmt("+ gathered (%d layers + emb)", kUnitsInFlight), k, [](const Row& r) { return r.gathered; });
      line("", "+ activations", k, [](const Row& r) { return r.activations; });
      line("", "= total", k, [](const Row& r) { return r.total(); });
    }
  }
  return 0;
}

const RegisterCommand kRegister{Command{
    "memory", "bytes per rank for ddp / zero1 / zero2 / zero3 from formulas (7B bf16 DDP = 112 GB)", run_memory, 40}};

}  // namespace
}  // namespace rz
