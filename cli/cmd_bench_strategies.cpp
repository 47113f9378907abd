// cli/cmd_bench_strategies.cpp: `ringzero bench-strategies` -- step time of ddp vs
// zero1 vs zero2 vs zero3 on --nproc processes, with the share of gradient communication
// hidden behind backward (and, for zero3, of the parameter all-gathers).
//
// One launch of --nproc-per-node (--nproc) ranks (ringzero re-executes itself with the
// command line as given; shm between processes on one host) runs the strategies in turn,
// each on a fresh model from the same seed, over one communicator. Every step is the
// trainer's own (train/step.h: forward, backward into the strategy, strategy.step with the
// settings table's weight_decay and grad_clip at a constant --lr) on synthetic tokens (a hash
// of step, rank and position: the numbers measure the machinery, not the data), for
// --untimed-steps + --steps steps, and rank 0 prints one line per strategy.
// The shape: --model's preset, or a training config's (--config: its model keys, batch,
// seq, precision, bucket size and buckets in flight), then the flags, later ones winning.
//   step_ms     median wall time of a whole step (forward, backward, strategy.step)
//   step_cpu_ms median CPU time of rank 0's process over a step (all its threads: compute,
//               comm thread; CLOCK_PROCESS_CPUTIME_ID around the step, as PyTorch's
//               time.process_time() in bench/torch_peer_step.py), then each rank's median
//   fwdbwd_ms   median forward + backward (gradient collectives run meanwhile)
//   opt_ms      median strategy.step(): exposed comm wait, clip, AdamW, param AllGather
//   comm_MB     bytes this rank sent per step, all collectives
//   grad_comm   the fraction of gradient-collective time overlapped with backward
//   hash        FNV-1a of the final fp32 params: equal hashes = bitwise-equal models
//               (zero3 cuts its buckets at layer boundaries: pass --buckets-per-unit so
//               that every strategy uses those buckets and the hashes can be compared)
//   gather_hidden  zero3 only: the fraction of parameter AllGather time hidden behind compute
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/check.h"
#include "base/checked.h"
#include "base/file.h"
#include "base/trace.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "train/config.h"
#include "train/rank_setup.h"
#include "train/run_paths.h"
#include "train/step.h"
#include "viz/timeline.h"
#include "zero/clip.h"
#include "zero/memory/plan.h"
#include "zero/strategy.h"

namespace rz {
namespace {

struct BenchArgs {
  std::string model = "d6";
  std::string config;              // --config FILE: a training config's shape (bench_shape)
  std::string strategy = "all";
  int steps = 10;
  int untimed = 2;
  int accum = 1;
  // --nproc-per-node (--nproc), --vocab, --batch, --seq, --precision, --transport, --lr,
  // --weight-decay, --grad-clip, --bucket-mb and --buckets-in-flight: rows of train's
  // settings table, with train's defaults but for the bench's 2 ranks, T 256 and lr 3e-4.
  TrainConfig settings = [] {
    TrainConfig c;
    c.nproc_per_node = 2;
    c.seq = 256;
    c.lr = 3e-4;
    return c;
  }();
  bool buckets_per_unit = false;
  std::string trace;               // --trace FILE: one timeline per strategy, FILE with .STRATEGY before its extension
  std::string trace_steps;         // A:B; default: the first three timed steps
};

// FILE.STRATEGY.json, one trace file per strategy, as --help and docs/train.md say: "run" and
// "run.json" give "run.zero2.json"; any other name keeps its extension ahead of ours
// ("x.bin" gives "x.bin.zero2.json", never a ".bin" a shard pattern would match).
std::string trace_path_for(const std::string& path, const std::string& strategy) {
  const std::string ext = ".json";
  const bool json = path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0 &&
                    path[path.size() - ext.size() - 1] != '/';
  return (json ? path.substr(0, path.size() - ext.size()) : path) + "." + strategy + ext;
}

// The model shape: --config's (preset plus its model keys) or --model's preset, then --vocab.
GPT2Config bench_shape(const BenchArgs& a) {
  GPT2Config cfg;
  if (!a.config.empty()) {
    TrainConfig tc;
    if (a.settings.vocab > 0) tc.vocab = a.settings.vocab;  // no tokenizer.bin needed when the vocab is given
    load_config_toml(tc, a.config);
    cfg = config_model_shape(tc);
  } else {
    cfg = model_preset(a.model);
  }
  cfg = override_shape(cfg, {.vocab = a.settings.vocab});
  finalize_config(cfg);
  return cfg;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint64_t fnv1a(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// --strategy's kinds: one, or every row of the traits table for "all".
std::vector<StrategyKind> bench_kinds(const BenchArgs& a) {
  if (a.strategy != "all") return {parse_strategy(a.strategy)};
  return {std::begin(kStrategyKinds), std::end(kStrategyKinds)};
}

// Samples of the timed steps (after --untimed-steps), one per step.
struct StepSamples {
  std::vector<double> step_ms, step_cpu_ms, fb_ms, opt_ms, overlap, mb_sent, comm_ms, gather_hidden;
};

// --untimed-steps + --steps training steps (train/step.h) on this rank's synthetic batches
// (a hash of step, rank and micro-step: every rank's differ, every run's are the same).
StepSamples run_steps(const BenchArgs& a, int rank, GPT2& model, Strategy& st, Communicator& comm,
                      TraceWindow& timeline) {
  const int B = a.settings.batch, T = a.settings.seq, V = model.config().vocab_size;
  StepSamples t;
  for (int step = 0; step < a.untimed + a.steps; ++step) {
    timeline.begin_step(comm, step + 1);
    const MicroBatchFn fill = [&](int m, int* in, int* tg) {
      for (int i = 0; i < B * T + 1; ++i) {
        uint32_t x = static_cast<uint32_t>(step * 1000003 + (rank * a.accum + m) * 7919 + i);
        x ^= x >> 13;
        x *= 0x5bd1e995u;
        x ^= x >> 15;
        int tok = static_cast<int>(x % static_cast<uint32_t>(V));
        if (i < B * T) in[i] = tok;
        if (i > 0) tg[i - 1] = tok;
      }
    };
    const StepTimings s = timed_step(model, st, B, T, a.accum, static_cast<float>(a.settings.lr), fill);
    timeline.end_step(comm, step + 1, s.stats.comm_overlapped);
    if (step >= a.untimed) {
      t.step_ms.push_back(s.total_s() * 1e3);
      t.step_cpu_ms.push_back(s.cpu_s * 1e3);
      t.fb_ms.push_back((s.fwd_s + s.bwd_s) * 1e3);
      t.opt_ms.push_back(s.opt_s * 1e3);
      t.overlap.push_back(s.stats.comm_overlapped);
      t.mb_sent.push_back(s.stats.comm_bytes_sent / 1e6);
      t.comm_ms.push_back(s.stats.comm_seconds * 1e3);
      t.gather_hidden.push_back(s.stats.gather_hidden);
    }
  }
  return t;
}

// One strategy on this rank's communicator: a fresh model from seed 42 on the rank's
// placement, its steps, and rank 0's line.
void bench_strategy(const BenchArgs& a, StrategyKind kind, const RankEnv& env, const RankPlacement& at,
                    Communicator& comm) {
  const GPT2Config cfg = bench_shape(a);
  RZ_CHECK(a.settings.seq <= cfg.max_seq_len, "--seq: expected at most the model's maxT %d, got %d",
           cfg.max_seq_len, a.settings.seq);
  const std::string name = strategy_name(kind);
  ModelOptions mo;
  mo.precision = a.settings.precision();
  mo.backend = at.backend;
  // As train does (train/loop.cpp): zero1/zero2 gather into parameters the peers read in place.
  mo.shared_params = comm.reads_shared_memory() && strategy_traits(kind).gathers_params_after_step();
  GPT2 model(cfg, mo);
  model.init_random(42);
  TrainConfig tc = a.settings;
  tc.strategy = kind;
  StrategyOptions so = strategy_options(tc, mo.precision);
  so.buckets_per_unit = a.buckets_per_unit;
  auto st = make_strategy(model, comm, so);

  TraceSteps window{a.untimed + 1, a.untimed + std::min(a.steps, 3)};
  if (!a.trace_steps.empty()) window = parse_trace_steps(a.trace_steps, "--trace-steps");
  TraceWindow timeline(a.trace.empty() ? "" : trace_path_for(a.trace, name), window, a.untimed + a.steps,
                       name + " " + precision_name(a.settings.precision()), model.backend().trace_clock());
  const StepSamples t = run_steps(a, env.rank, model, *st, comm, timeline);
  timeline.finish(comm);
  std::vector<float> params(model.layout().total);
  st->checkpoint_state().params_f32(params.data());  // collective: zero3 gathers them
  HostCollectives host_comm(comm, model.backend());
  const std::vector<double> rank_cpu_ms = all_gather_partials(host_comm, median(t.step_cpu_ms));
  if (env.rank == 0) {
    std::string per_rank;
    for (double c : rank_cpu_ms) {
      char item[32];
      std::snprintf(item, sizeof item, "%s%.1f", per_rank.empty() ? "" : " ", c);
      per_rank += item;
    }
    std::printf("%-6s %-5s N=%d  step_ms %8.1f  step_cpu_ms %8.1f (ranks %s)  fwdbwd_ms %8.1f  opt_ms %7.1f  comm_MB %7.2f  comm_ms %7.1f"
                "  grad_comm_overlapped %5.1f%%  hash %016llx%s\n",
                name.c_str(), precision_name(a.settings.precision()), comm.size(), median(t.step_ms), median(t.step_cpu_ms),
                per_rank.c_str(), median(t.fb_ms),
                median(t.opt_ms), median(t.mb_sent), median(t.comm_ms), 100.0 * median(t.overlap),
                static_cast<unsigned long long>(fnv1a(params.data(), params.size() * sizeof(float))),
                strategy_traits(kind).shards_params
                    ? (std::string("  gather_hidden ") + std::to_string(int(100.0 * median(t.gather_hidden))) + "%").c_str()
                    : "");
    std::fflush(stdout);
  }
  comm.barrier();
}

// This rank's part: one communicator, then --strategy's kinds in turn (all of them for "all").
int bench_rank(const BenchArgs& a) {
  RankEnv env = rank_env_from_environment();
  const RankPlacement at = place_rank(DeviceSpec{}, env, CommBackend::ring);  // CPU ranks
  CommOptions copts;
  copts.transport = a.settings.transport;
  auto comm = connect_rank(env, at, copts);
  for (StrategyKind kind : bench_kinds(a)) bench_strategy(a, kind, env, at, *comm);
  return 0;
}

int run_bench_strategies(int argc, char** argv) {
  BenchArgs a;
  CLI::App app{
      "Step time of ddp vs zero1 vs zero2 vs zero3 on --nproc ranks (processes), and the share of the\n"
      "gradient communication hidden behind backward (zero3: also of its parameter all-gathers).\n"
      "Each step is train's own (forward, backward into the strategy, its step: clip with --grad-clip,\n"
      "AdamW with --weight-decay, at the constant rate --lr) on synthetic tokens; one launch of the\n"
      "ranks runs the strategies in turn. Rank 0 prints one line\n"
      "per strategy with medians over --steps timed steps (after --untimed-steps) and a hash of the\n"
      "final params (equal hashes: bitwise-equal models, as fp32 without --accum must give).\n"
      "The shape: --model's preset, or --config's (a training config: its model keys, batch, seq,\n"
      "precision, ranks, bucket size), then the flags. step_cpu_ms is rank 0's process CPU per step\n"
      "(all threads), the figure bench/ddp_vs_torch.sh compares with PyTorch DDP's.",
      "ringzero bench-strategies"};
  app.add_option("--model", a.model, "preset")->capture_default_str();
  app.add_option("--config", a.config, "training config (TOML) whose model shape, batch, seq, precision, ranks and "
                                       "bucket size to bench (flags override it)");
  // --vocab: e.g. 257, byte-level: wte no longer dominates.
  add_setting_flag(app, a.settings, "vocab", {})->check(CLI::Range(0, 1 << 24));
  std::vector<std::string> strategy_choices = strategy_names();
  strategy_choices.emplace_back("all");
  app.add_option("--strategy", a.strategy, "a strategy or all")->check(CLI::IsMember(strategy_choices))->capture_default_str();
  add_setting_flags(app, a.settings, {"precision", "transport"});
  add_setting_flag(app, a.settings, "nproc_per_node", {"--nproc"})->check(CLI::Range(1, 64));
  add_setting_flag(app, a.settings, "batch", {})->check(CLI::Range(1, 4096));
  add_setting_flag(app, a.settings, "seq", {})->check(CLI::Range(1, 1 << 20));
  add_number(app, "--steps", a.steps, "timed steps")->check(CLI::Range(1, 100000))->capture_default_str();
  add_number(app, "--untimed-steps", a.untimed, "steps run before the timed ones (not timed)")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  refuse_renamed_warmup(app, "bench-strategies");
  add_number(app, "--accum", a.accum, "micro-steps per step")->check(CLI::Range(1, 4096))->capture_default_str();
  add_setting_flags(app, a.settings, {"lr", "weight_decay", "grad_clip", "bucket_mb", "buckets_in_flight"});
  app.add_flag("--buckets-per-unit", a.buckets_per_unit,
               "every strategy cuts its buckets at layer boundaries as zero3 does (same buckets: comparable hashes)");
  app.add_option("--trace", a.trace,
                 "Chrome trace-event timeline (Perfetto, chrome://tracing) per strategy: FILE.STRATEGY.json");
  app.add_option("--trace-steps", a.trace_steps, "steps A:B (1-based, warmup included) the trace covers "
                                                  "(default: the first three timed steps)");
  if (!parse_command_line(app, argc, argv)) return 0;
  RZ_CHECK(a.trace_steps.empty() || !a.trace.empty(), "--trace-steps: does nothing without --trace (the timeline's file)");
  check_buckets_in_flight_read(app.count("--buckets-in-flight") > 0, a.strategy);
  if (!a.trace_steps.empty())
    RZ_CHECK(parse_trace_steps(a.trace_steps, "--trace-steps").first <= a.untimed + a.steps,
             "--trace-steps: %s starts after the last step %d (untimed + timed steps)", a.trace_steps.c_str(),
             a.untimed + a.steps);
  TrainConfig tc;  // --config's, else the defaults (no data)
  if (!a.config.empty()) {
    tc.config_path = a.config;
    load_config_toml(tc, a.config);
  }
  if (!a.trace.empty()) {
    // The timelines follow train's rules (data/output_paths.h): not over the config or what
    // its run reads, not a name its data patterns match, not inside a data directory, and
    // nothing but a regular file is replaced.
    CommandPaths paths;
    for (const std::string& k : strategy_names()) paths.files.push_back({"--trace", trace_path_for(a.trace, k)});
    paths.inputs = train_inputs(tc);
    paths.shard_patterns = {{"data", tc.data}, {"val_data", tc.val_data}};
    check_outputs(paths);
  }
  if (!a.config.empty()) {
    // The config's values where no flag was given. Every rank re-reads the same file.
    for (const char* key : {"precision", "nproc_per_node", "batch", "seq", "bucket_mb", "buckets_in_flight"})
      if (a.settings.origins.count(key) == 0) set_config_value(a.settings, key, get_config_value(tc, key));
  }
  if (started_by_ringzero()) return bench_rank(a);

  // An unknown preset, a bad config or a missing tokenizer fails here, before any launch.
  const GPT2Config shape = bench_shape(a);
  const int nproc = a.settings.nproc_per_node;
  std::printf("bench-strategies: %s (L=%d C=%d NH=%d V=%d), B=%d T=%d, N=%d, %s, buckets %g MiB, %d untimed + %d "
              "timed steps (median)\n",
              a.config.empty() ? a.model.c_str() : a.config.c_str(), shape.num_layers, shape.channels,
              shape.num_heads, shape.vocab_size, a.settings.batch, a.settings.seq, nproc,
              precision_name(a.settings.precision()), a.settings.bucket_mb, a.untimed, a.steps);
  std::fflush(stdout);

  // Each strategy's --nproc ranks share this machine's memory: refuse what cannot fit
  // before any is launched (zero/memory/plan.h). The strategies run one after another.
  for (StrategyKind k : bench_kinds(a)) {
    MemoryPlanInput in;
    in.cfg = shape;
    in.precision = a.settings.precision();
    in.kind = k;
    in.nranks = nproc;
    in.batch = a.settings.batch;
    in.seq = a.settings.seq;
    in.bucket_mb = a.settings.bucket_mb;
    in.buckets_in_flight = a.settings.buckets_in_flight;
    in.threads = std::max(1, online_cores() / nproc);
    check_fits_host_memory(in, nproc, 0.0, (std::string("bench-strategies ") + strategy_name(k)).c_str(),
                           "a smaller --batch, --seq or model, or fewer --nproc");
  }
  // The ranks read the command line as it was given: each runs --strategy's kinds in turn.
  RankLaunch job;
  job.nproc_per_node = nproc;
  if (!should_launch(job)) return bench_rank(a);
  return launch_ranks(job, std::vector<std::string>(argv, argv + argc));
}

const RegisterCommand kRegister{Command{"bench-strategies",
                                        "step time of ddp vs zero1 vs zero2 vs zero3 and the overlap of comm",
                                        run_bench_strategies, 70}};

}  // namespace
}  // namespace rz
