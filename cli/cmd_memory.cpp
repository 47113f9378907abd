// cli/cmd_memory.cpp: `ringzero memory` -- bytes per rank for every strategy without
// running anything.
//
// Two sources of a model size:
//   --params P             a bare parameter count: model states only (the ZeRO paper's and
//                          the seed article's tables; docs/comm.md), from the bytes/param formulas;
//   --model / --layers ... a model shape (GPT-2 or Llama): the planner (zero/memory/plan.h) gives the exact
//                          model states (bucket padding included), zero2's staging buckets, the
//                          activations for (--batch, --seq, --recompute), the step's working
//                          buffers and the start-up transient, and so the peak per rank;
//                          --budget turns it around: the largest micro-batch that fits, per
//                          strategy and recompute mode.
// The formulas are in zero/memory/formula.h; GB here are decimal (1e9 bytes), as the seed
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
#include "cli/cli_number.h"
#include "cli/command.h"
#include "train/config.h"
#include "zero/memory/plan.h"
#include "zero/buckets.h"
#include "zero/memory/formula.h"
#include "zero/strategy.h"

namespace rz {
namespace {

struct MemoryArgs {
  std::string model;
  int seq = 0;  // T: 0 takes the model's maxT (not train's seq, which is never 0)
  double params = 0.0;
  std::vector<int> nranks;
  std::string strategy = "all";
  std::string recompute = "none";
  std::string budget;
  std::string device = "cpu";
  int threads = 1;
  bool json = false;
  // --layers, --channels, --heads, --vocab, --max-seq, --batch, --precision, --attention,
  // --bucket-mb, --buckets-in-flight and --grad-reduce-dtype: rows of train's settings table,
  // with train's defaults but for memory's micro-batch of 1.
  TrainConfig settings = [] {
    TrainConfig c;
    c.batch = 1;
    return c;
  }();
  bool recompute_given = false;  // --recompute was on the command line

  // A model shape was given (the planner), else a bare --params count.
  bool shape() const {
    return !model.empty() || settings.layers || settings.channels || settings.heads || settings.vocab || seq ||
           settings.max_seq || settings.family != "auto" ||
           settings.kv_heads || settings.intermediate || settings.classifier != "auto";
  }
};

struct Row {
  StrategyKind kind;
  int nranks;
  PerParamBytes paper, ringzero;
  double states_paper = 0, states = 0;  // bytes per rank
  double states_fp32_shard = 0;         // zero2 with --grad-shard-fp32 (fp32 owned gradient shard)
  double staging = -1, activations = -1;  // -1: unknown (bare parameter count)
  double wide = 0;                        // --grad-reduce-dtype fp32 (bf16): the fp32 reduce buffers
  int staging_buffers = 0;                // zero2: general staging buffers (besides wte's)
  ExactStateBytes exact = {};             // per tag (shape given); else from the per-param formula
  std::vector<MemoryPlan> plans = {};     // shape given: the planner's answer per recompute mode asked
  double gathered = 0;                    // zero3: gathered parameter units in flight (shape given)
  double total() const { return double(plans.at(0).peak()); }
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
  const StrategyTraits& t = strategy_traits(k);
  if (t.shards_params) return strfmt("(%s+%s+%s)/N", pb, pb, opt);
  const std::string grads = t.shards_grads ? strfmt("%s/N", paper ? pb : "4") : std::string(pb);
  return strfmt("%s+%s+%s%s", pb, grads.c_str(), opt, t.shards_optimizer ? "/N" : "");
}

// The flags into a, checked against each other; false when --help was printed.
bool parse_memory_args(int argc, char** argv, MemoryArgs& a) {
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
      "with a model shape (--model or --layers/--channels/...) the planner adds, per rank: the exact\n"
      "allocation (bucket padding included), the staging buckets, the activations for --batch x --seq\n"
      "under --recompute (none keeps every layer's activations; gelu drops the MLP's GELU outputs;\n"
      "layer keeps only each block's input and reruns the block in backward), the step's working\n"
      "buffers (the ring's ReduceScatter chunk; CPU kernel scratch with --device cpu), and the\n"
      "sharded strategies' start-up copy; peak = max(step, start-up). With --budget 80GB it prints\n"
      "the largest micro-batch per rank that fits, per strategy and recompute mode.",
      "ringzero memory"};
  app.add_option("--model", a.model, "preset: " + or_list(model_preset_names()) + " (docs/model.md)");
  add_setting_flags(app, a.settings, {"family", "kv_heads", "intermediate", "classifier"});
  // The shape keys override the preset (d12 when only they are given).
  add_setting_flags(app, a.settings, {"layers", "channels", "heads", "vocab"});
  add_number(app, "--seq", a.seq, "T: sequence length of the activations and rows of wpe (default the model's maxT)")
      ->check(CLI::PositiveNumber);
  add_setting_flags(app, a.settings, {"max_seq"});  // rows of wpe when they differ from --seq
  add_setting_flags(app, a.settings, {"batch"});  // B of the activations
  add_number(app, "--params", a.params, "a bare parameter count such as 7e9 (model states only)");
  add_number(app, "--nranks", a.nranks, "number of ranks N (repeatable; default 1 2 4 8 64)")
      ->check(CLI::Range(1, 1 << 20));
  std::vector<std::string> strategy_choices = strategy_names();
  strategy_choices.emplace_back("all");
  add_setting_flags(app, a.settings, {"precision"});
  app.add_option("--strategy", a.strategy, "a strategy or all")
      ->check(CLI::IsMember(strategy_choices))->capture_default_str();
  add_setting_flags(app, a.settings, {"bucket_mb", "buckets_in_flight"});
  std::vector<std::string> recompute_choices = recompute_names();
  recompute_choices.emplace_back("all");
  app.add_option("--recompute", a.recompute,
                 "activations kept: none, gelu, layer (or all: one row each); --budget tries all unless given")
      ->check(CLI::IsMember(recompute_choices));
  add_setting_flags(app, a.settings, {"attention"});
  app.add_option("--budget", a.budget, "memory per rank, e.g. 80GB (1e9 bytes) or 24GiB / 24G (2^30 bytes): print the largest micro-batch that fits");
  app.add_option("--device", a.device, "cpu (count the CPU kernels' scratch) or cuda (it allocates none of it)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  add_number(app, "--threads", a.threads, "OpenMP threads per rank (CPU attention scratch is per thread)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  add_setting_flags(app, a.settings, {"grad_reduce_dtype"});
  app.add_flag("--json", a.json, "print one JSON object instead of the table");
  if (!parse_command_line(app, argc, argv)) return false;
  RZ_CHECK(a.settings.batch >= 1, "--batch: expected a positive micro-batch size, found %d", a.settings.batch);

  const bool shape = a.shape();
  const bool params = app.count("--params") > 0;
  // The value first: --params 0 or -1 is a bad count, not a missing model.
  RZ_CHECK(!params || (a.params >= 1 && a.params <= 1e15),
           "--params: expected a parameter count in [1, 1e15] (such as 7e9), found %g", a.params);
  RZ_CHECK(!(shape && params), "--params: a bare parameter count cannot be combined with a model shape (--model, --layers, ...)");
  RZ_CHECK(shape || params, "give a model: --model PRESET, --layers/--channels/--heads/--vocab/--seq, or --params COUNT");
  if (!shape)  // a bare count gives the model states only: these would change nothing
    for (const char* flag : {"--batch", "--recompute", "--attention", "--budget", "--device", "--threads", "--bucket-mb",
                             "--buckets-in-flight"})
      RZ_CHECK(app.count(flag) == 0,
               "%s: does nothing with a bare --params count, which gives the model states only (give a model shape: "
               "--model or --layers/--channels/...)", flag);
  check_buckets_in_flight_read(app.count("--buckets-in-flight") > 0, a.strategy);
  if (a.nranks.empty()) a.nranks = {1, 2, 4, 8, 64};
  a.recompute_given = app.count("--recompute") > 0;
  return true;
}

// What the tables are about: a model shape (or a bare parameter count), the precision, the
// strategies and the recompute modes asked.
struct MemoryQuery {
  MemoryArgs a;
  bool shape = false;   // a model shape (else a bare --params count: model states only)
  GPT2Config cfg;       // finalized (shape)
  ParamLayout layout;   // of cfg (shape)
  double P = 0;         // parameters
  int T = 0;            // sequence length of the activations (shape)
  Precision prec = Precision::fp32;
  bool wide = false;    // bf16 gradients reduced in fp32 (--grad-reduce-dtype fp32)
  std::vector<StrategyKind> kinds;
  std::vector<Recompute> recomputes;

  // The planner's question for strategy k on n ranks under recompute mode rc.
  MemoryPlanInput plan_input(StrategyKind k, int n, Recompute rc) const {
      MemoryPlanInput in;
      in.cfg = cfg;
      in.precision = prec;
      in.recompute = rc;
      in.attention = a.settings.attention;
      in.kind = k;
      in.nranks = n;
      in.batch = a.settings.batch;
      in.seq = T;
      in.bucket_mb = a.settings.bucket_mb;
      in.buckets_in_flight = a.settings.buckets_in_flight;
      in.cpu = a.device == "cpu";
      in.threads = a.threads;
      in.grad_reduce_fp32 = wide;
      return in;
  }
};

// The shape, precision, strategies and modes the (checked) flags ask for.
MemoryQuery resolve_query(const MemoryArgs& a) {
  const bool shape = a.shape();
  const Precision prec = resolve_precision(a.settings.precision_choice, parse_device_spec(a.device));
  RZ_CHECK(a.settings.grad_reduce_dtype != "bf16" || prec == Precision::bf16,
           "--grad-reduce-dtype: bf16 needs --precision bf16 (fp32 gradients are reduced in fp32)");
  const bool wide = prec == Precision::bf16 && a.settings.grad_reduce_dtype == "fp32";
  std::vector<StrategyKind> kinds;
  if (a.strategy == "all")
    kinds.assign(std::begin(kStrategyKinds), std::end(kStrategyKinds));
  else
    kinds = {parse_strategy(a.strategy)};

  GPT2Config cfg;
  ParamLayout layout;
  double P = a.params;
  int T = 0;
  RZ_CHECK(a.settings.max_seq == 0 || a.seq <= a.settings.max_seq, "--seq: T=%d exceeds --max-seq %d", a.seq, a.settings.max_seq);
  if (shape) {
    // maxT: --max-seq, else --seq (the rows of wpe the activations need).
    cfg = override_shape(model_preset(a.model.empty() ? "d12" : a.model),
                         {.layers = a.settings.layers, .channels = a.settings.channels, .heads = a.settings.heads, .vocab = a.settings.vocab,
                          .max_seq = a.settings.max_seq ? a.settings.max_seq : a.seq, .family = a.settings.family,
                          .kv_heads = a.settings.kv_heads, .intermediate = a.settings.intermediate,
                          .classifier = a.settings.classifier});
    finalize_config(cfg);
    layout = build_param_layout(cfg);
    P = static_cast<double>(layout.total);
    T = a.seq ? a.seq : cfg.max_seq_len;
    // The planner counts bytes in 64 bits: a shape whose activations alone pass an exabyte
    // (an upper estimate in doubles: every layer's (B, T, C) tensors and (B, NH, T, T)
    // attention, the (B, T, Vp) logits) is refused instead of wrapping around.
    const double bt = double(a.settings.batch) * T;
    const double upper = 4.0 * bt *
                         (64.0 * cfg.channels * cfg.num_layers + 2.0 * cfg.num_heads * cfg.num_layers * T +
                          2.0 * cfg.padded_vocab_size);
    RZ_CHECK(upper < 1e18, "--batch %d x --seq %d: the activations of L=%d C=%d would pass 1e18 bytes; nothing that "
             "large can be planned", a.settings.batch, T, cfg.num_layers, cfg.channels);
  }
  const std::vector<Recompute> recomputes =
      a.recompute == "all" ? std::vector<Recompute>(std::begin(kRecomputes), std::end(kRecomputes))
                           : std::vector<Recompute>{parse_recompute(a.recompute)};
  return MemoryQuery{a, shape, cfg, layout, P, T, prec, wide, kinds, recomputes};
}

// --budget: the largest micro-batch that fits, per strategy and recompute mode.
void print_budget(const MemoryQuery& q) {
  const MemoryArgs& a = q.a;
  const bool shape = q.shape;
  const GPT2Config& cfg = q.cfg;
  const int T = q.T;
  const Precision prec = q.prec;
  const std::vector<StrategyKind>& kinds = q.kinds;
  const std::vector<Recompute>& recomputes = q.recomputes;
  RZ_CHECK(shape, "--budget: needs a model shape (--model or --layers/...), not a bare --params count");
  const double budget = parse_byte_size(a.budget, "--budget");
  RZ_CHECK(budget > 0, "--budget: expected a size above 0 bytes, such as 80GB, found '%s'", a.budget.c_str());
  const std::vector<Recompute> modes = a.recompute == "none" && !a.recompute_given
                                           ? std::vector<Recompute>(std::begin(kRecomputes), std::end(kRecomputes))
                                           : recomputes;
  nlohmann::json j = {{"budget_bytes", budget}, {"precision", precision_name(prec)}, {"seq", T},
                      {"rows", nlohmann::json::array()}};
  if (!a.json) {
    std::printf("largest micro-batch B per rank whose peak fits %s (%.0f bytes); L=%d C=%d T=%d, %s, %s ranks\n\n",
                a.budget.c_str(), budget, cfg.num_layers, cfg.channels, T, precision_name(prec), a.device.c_str());
    std::printf("%-7s %-10s", "", "recompute");
    for (int n : a.nranks) std::printf(" %8s", strfmt("N=%d", n).c_str());
    std::printf("\n");
  }
  for (StrategyKind k : kinds)
    for (Recompute rc : modes) {
      if (!a.json) std::printf("%-7s %-10s", strategy_name(k), recompute_name(rc));
      for (int n : a.nranks) {
        const int b = largest_batch(q.plan_input(k, n, rc), budget);
        if (a.json)
          j["rows"].push_back({{"strategy", strategy_name(k)}, {"recompute", recompute_name(rc)}, {"nranks", n},
                               {"largest_batch", b}});
        else
          std::printf(" %8s", b == 0 ? "-" : std::to_string(b).c_str());
      }
      if (!a.json) std::printf("\n");
    }
  if (a.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    std::printf("\n- : not even B=1 fits. peak = max(model states + staging + activations + working, start-up)\n");
}

// One row per strategy and rank count: the formulas, and with a shape the planner's answer.
std::vector<Row> strategy_rows(const MemoryQuery& q) {
  const MemoryArgs& a = q.a;
  const bool shape = q.shape;
  const GPT2Config& cfg = q.cfg;
  const ParamLayout& layout = q.layout;
  const double P = q.P;
  const Precision prec = q.prec;
  const bool wide = q.wide;
  const std::vector<StrategyKind>& kinds = q.kinds;
  const std::vector<Recompute>& recomputes = q.recomputes;
  std::vector<Row> rows;
  for (StrategyKind k : kinds) {
    for (int n : a.nranks) {
      Row r{k, n, paper_formula(k, prec, n), ringzero_formula(k, prec, n)};
      r.states_paper = P * r.paper.total();
      r.states = P * r.ringzero.total();
      r.states_fp32_shard = P * ringzero_formula(k, prec, n, true).total();
      if (shape) {
        // The plan and pools the strategy would build (zero/memory/formula.h).
        StagingPool pool;
        const ExactStateBytes e =
            predicted_state_bytes(layout, cfg.num_layers, k, prec, n, a.settings.bucket_mb, a.settings.buckets_in_flight, false, &pool,
                                  wide);
        for (Recompute rc : recomputes) r.plans.push_back(plan_memory(q.plan_input(k, n, rc)));
        r.staging_buffers = pool.general;
        r.states = static_cast<double>(e.total() - e.staging - e.gathered - e.wide);
        r.wide = static_cast<double>(e.wide);
        r.gathered = static_cast<double>(e.gathered);
        const ExactStateBytes f =
            predicted_state_bytes(layout, cfg.num_layers, k, prec, n, a.settings.bucket_mb, a.settings.buckets_in_flight, true);
        r.states_fp32_shard = static_cast<double>(f.total() - f.staging - f.gathered);
        r.exact = e;
        r.staging = static_cast<double>(e.staging);
        r.activations = static_cast<double>(r.plans[0].activations);
      }
      rows.push_back(r);
    }
  }
  return rows;
}

// The rows as one JSON object (`ringzero plot memory --estimate` reads it).
void print_json(const MemoryQuery& q, const std::vector<Row>& rows) {
  nlohmann::json j;
  j["precision"] = precision_name(q.prec);
  j["grad_reduce_dtype"] = q.wide || q.prec == Precision::fp32 ? "fp32" : "bf16";
  j["params"] = q.P;
  if (q.shape) {
    j["model"] = {{"family", family_name(q.cfg.family)}, {"layers", q.cfg.num_layers}, {"channels", q.cfg.channels},
                  {"heads", q.cfg.num_heads}, {"kv_heads", q.cfg.num_kv_heads}, {"intermediate", q.cfg.intermediate},
                  {"tied", q.cfg.tied}, {"vocab", q.cfg.vocab_size}, {"padded_vocab", q.cfg.padded_vocab_size},
                  {"max_seq_len", q.cfg.max_seq_len}, {"batch", q.a.settings.batch}, {"seq", q.T}};
    j["recompute"] = recompute_name(q.recomputes[0]);
    j["attention"] = attention_name(q.a.settings.attention);
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
    auto tag = [&](size_t exact, double per_param) { return q.shape ? double(exact) : q.P * per_param; };
    o["bytes_by_tag"] = {{"params", tag(r.exact.params, r.ringzero.params)},
                         {"grads", tag(r.exact.grads, r.ringzero.grads)},
                         {"master", tag(r.exact.master, r.ringzero.master)},
                         {"adam_m", tag(r.exact.adam_m, r.ringzero.adam_m)},
                         {"adam_v", tag(r.exact.adam_v, r.ringzero.adam_v)},
                         {"comm", q.shape ? r.staging + r.wide + double(r.plans[0].ring_work) : 0.0},
                         {"activations", q.shape ? r.activations : 0.0},
                         {"workspace", q.shape ? double(r.plans[0].kernel_scratch) : 0.0}};
    if (q.shape) {
      // The first --recompute mode's plan (all: none); "by_recompute" has every mode asked.
      const MemoryPlan& p = r.plans[0];
      o["staging_bytes"] = r.staging;
      o["fp32_reduce_bytes"] = r.wide;
      o["activation_bytes"] = r.activations;
      o["ring_work_bytes"] = p.ring_work;
      o["kernel_scratch_bytes"] = p.kernel_scratch;
      o["startup_bytes"] = p.startup;
      o["step_bytes"] = p.step();
      o["total_bytes"] = p.peak();  // the peak per rank: max(step, start-up)
      nlohmann::json by = nlohmann::json::object();
      for (size_t i = 0; i < q.recomputes.size(); ++i)
        by[recompute_name(q.recomputes[i])] = {{"activation_bytes", r.plans[i].activations},
                                             {"total_bytes", r.plans[i].peak()}};
      o["by_recompute"] = by;
    }
    j["rows"].push_back(o);
  }
  std::printf("%s\n", j.dump(2).c_str());
}

// The rows as the table: one line per term, one column per rank count.
void print_table(const MemoryQuery& q, const std::vector<Row>& rows) {
  if (q.shape)
    std::printf("model: %s (Vp %d): %.0f parameters; %s; activations for B=%d T=%d, %s attention; %s ranks\n",
                describe_shape(q.cfg).c_str(), q.cfg.padded_vocab_size, q.P, precision_name(q.prec), q.a.settings.batch, q.T,
                attention_name(q.a.settings.attention), q.a.device.c_str());
  else
    std::printf("model: %.3g parameters (--params: model states only); %s\n", q.P, precision_name(q.prec));
  std::printf("per-rank bytes, GB = 1e9 bytes; AdamW; %s%s\n\n",
              q.prec == Precision::fp32 ? "fp32 params are the master weights"
                                      : "bf16 params/grads + fp32 master, m, v",
              q.prec == Precision::fp32 ? ""
              : q.wide                  ? "; gradients reduced in fp32 (--grad-reduce-dtype fp32)"
                                      : "; gradients reduced in bf16");
  std::printf("%-7s %-32s", "", "bytes/param");
  for (int n : q.a.nranks) std::printf(" %11s", strfmt("N=%d", n).c_str());
  std::printf("\n");
  auto line = [&](const char* name, const std::string& label, StrategyKind k, auto value) {
    std::printf("%-7s %-32s", name, label.c_str());
    for (const Row& r : rows)
      if (r.kind == k) std::printf(" %11s", dec_bytes(value(r)).c_str());
    std::printf("\n");
  };
  for (StrategyKind k : q.kinds) {
    const char* name = strategy_name(k);
    line(name, "model states " + formula_text(k, q.prec, true), k,
         [](const Row& r) { return r.states_paper; });
    if (q.shape) line("", "ringzero exact (padding)", k, [](const Row& r) { return r.states; });
    const StrategyTraits& t = strategy_traits(k);
    // zero3's formula folds its gradient shard into the 16/N: the fp32-shard row is zero2's.
    if (t.shards_grads && !t.shards_params && q.prec == Precision::bf16)
      line("", "--grad-shard-fp32 " + formula_text(k, q.prec, false), k,
           [](const Row& r) { return r.states_fp32_shard; });
    if (q.shape) {
      if (t.shards_grads) {
        const auto z = std::find_if(rows.begin(), rows.end(), [k](const Row& r) { return r.kind == k; });
        line("", strfmt("+ staging (%d+1 wte buckets)", z->staging_buffers), k, [](const Row& r) { return r.staging; });
      }
      if (t.shards_params)
        line("", strfmt("+ gathered (%d layers + emb)", kUnitsInFlight), k, [](const Row& r) { return r.gathered; });
      if (q.wide) line("", "+ fp32 reduce buffers", k, [](const Row& r) { return r.wide; });
      for (size_t i = 0; i < q.recomputes.size(); ++i)
        line("", strfmt("+ activations (recompute %s)", recompute_name(q.recomputes[i])), k,
             [i](const Row& r) { return double(r.plans[i].activations); });
      line("", "+ working (ring, kernels)", k, [](const Row& r) { return double(r.plans[0].working()); });
      if (std::any_of(rows.begin(), rows.end(), [k](const Row& r) { return r.kind == k && r.plans[0].startup > 0; }))
        line("", "start-up peak", k, [](const Row& r) { return double(r.plans[0].startup); });
      for (size_t i = 0; i < q.recomputes.size(); ++i)
        line("", q.recomputes.size() > 1 ? strfmt("= peak (recompute %s)", recompute_name(q.recomputes[i])) : std::string("= peak"),
             k, [i](const Row& r) { return double(r.plans[i].peak()); });
    }
  }
}

int run_memory(int argc, char** argv) {
  MemoryArgs a;
  if (!parse_memory_args(argc, argv, a)) return 0;
  const MemoryQuery q = resolve_query(a);
  if (!q.a.budget.empty()) {
    print_budget(q);
    return 0;
  }
  const std::vector<Row> rows = strategy_rows(q);
  if (q.a.json)
    print_json(q, rows);
  else
    print_table(q, rows);
  return 0;
}

const RegisterCommand kRegister{Command{
    "memory", "bytes per rank for ddp / zero1 / zero2 / zero3 (7B bf16 DDP = 112 GB); --budget: largest micro-batch", run_memory, 40}};

}  // namespace
}  // namespace rz
