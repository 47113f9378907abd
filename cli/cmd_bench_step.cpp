// cli/cmd_bench_step.cpp: `ringzero bench-step`, the model's training-step benchmark.
//
// Times forward + backward + the trainer's optimizer step (train/step.h: a ddp strategy's
// step, clip and AdamW, with the settings table's weight_decay, grad_clip and a constant
// --lr) on one rank (no communication), on the CPU or a GPU
// (--device), and sets the step's achieved GFLOP/s next to what the backend's GEMM
// reaches alone on the same work (the CPU matmul kernels, cuBLASLt on a GPU: on a GPU that
// ratio is the MFU against the GEMM rate measured in the same run). FLOPs are
// counted the way llm.c counts them for MFU: 6 x params per token for the matmuls
// (forward 2, backward 4) plus 12 x L x C x T per token for attention (the full T x T
// score and value products, forward and backward, even though causal attention does
// about half of that). "GEMM alone" runs exactly the step's matmul calls (every linear
// layer's forward and both backward products, same precision, shapes and thread count)
// on their own: the ceiling the rest of the step (attention, layernorm, GELU, softmax,
// AdamW, bf16 conversions) is measured against. `--ops` adds the step's time split by
// kernel family (cli/step_profile.h replays the step's kernel calls under timers).
// The shape comes from a preset, a training config (`--config configs/tiny.toml`: its
// model keys, batch and seq), and shape flags, later ones winning.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <random>
#include <type_traits>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "base/checked.h"
#include "base/clock.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/gpt2.h"
#include "cli/cli_number.h"
#include "cli/command.h"
#include "comm/factory.h"
#include "train/config.h"
#include "train/rank_setup.h"
#include "train/step.h"
#include "zero/memory/plan.h"
#include "cli/step_profile.h"

namespace rz {
namespace {

struct StepTimes {
  double fwd = 0, bwd = 0, opt = 0;
  double cpu = 0;  // process CPU seconds per step (all threads)
  double total() const { return fwd + bwd + opt; }
};

// Median of each phase over `steps` timed steps after `untimed` untimed ones, each the
// trainer's own step (train/step.h): backward into a ddp strategy on one rank, then its
// strategy.step (clip, AdamW) with the settings table's weight_decay and grad_clip at a
// constant --lr. One rank: the ring's collectives return at once, nothing is communicated.
StepTimes time_steps(GPT2& model, const TrainConfig& settings, int B, int T, int untimed, int steps) {
  const int V = model.config().vocab_size;
  auto comms = make_thread_communicators(1, CommOptions{});
  TrainConfig one_rank = settings;
  one_rank.strategy = StrategyKind::ddp;
  auto strategy = make_strategy(model, *comms[0], strategy_options(one_rank, model.precision()));
  const MicroBatchFn fill = [&](int, int* x, int* y) {
    for (size_t i = 0; i < size_t(B) * T; ++i) {
      x[i] = int((i * 7919) % size_t(V));
      y[i] = int((i * 104729 + 1) % size_t(V));
    }
  };
  std::vector<double> f, b, o, c;
  for (int s = 0; s < untimed + steps; ++s) {
    const StepTimings t = timed_step(model, *strategy, B, T, 1, static_cast<float>(settings.lr), fill);
    if (s >= untimed) {
      c.push_back(t.cpu_s);
      f.push_back(t.fwd_s);
      b.push_back(t.bwd_s);
      o.push_back(t.opt_s);
    }
  }
  auto median = [](std::vector<double> a) {
    std::sort(a.begin(), a.end());
    return a[a.size() / 2];
  };
  return {median(f), median(b), median(o), median(c)};
}

// The step's matmuls alone, through the same backend ops in storage type E: per layer
// qkv, attproj, fc, fcproj (the family's widths and biases); then the classifier. Returns seconds for one step's worth
// (best of `reps`). The operands are random, not zeros: a GPU's clocks and power depend
// on how many bits toggle, and GEMMs on zeros ran about 13% faster on an H200.
template <typename E>
void fill_random(Backend& be, Buffer<E>& buf, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<E> host(buf.size());
  for (E& x : host) {
    if constexpr (std::is_same_v<E, float>) x = normal(rng);
    else x = float_to_bf16(normal(rng));
  }
  be.copy_from_host(buf.data(), host.data(), host.size() * sizeof(E));
}

template <typename E>
double time_gemms(Backend& be, const GPT2Config& cfg, int N, int reps) {
  const int C = cfg.channels, L = cfg.num_layers, Vp = cfg.padded_vocab_size, H = cfg.intermediate;
  const FamilyTraits& tr = family_traits(cfg.family);
  struct Shape {
    int C, OC, count;
    bool bias;
  };
  const Shape shapes[] = {{C, cfg.qkv_width(), L, tr.qkv_bias}, {C, C, L, tr.proj_bias}, {C, cfg.fc_width(), L, tr.fc_bias},
                          {H, C, L, tr.proj_bias}, {C, Vp, 1, false}};
  const Device dev = be.device();
  Ops<E>& op = be.ops<E>();
  double total = 0;
  for (const Shape& s : shapes) {
    Buffer<E> inp(MemTag::workspace, size_t(N) * s.C, dev), w(MemTag::workspace, size_t(s.OC) * s.C, dev),
        bias(MemTag::workspace, s.OC, dev), out(MemTag::workspace, size_t(N) * s.OC, dev),
        dinp(MemTag::workspace, size_t(N) * s.C, dev), dw(MemTag::workspace, size_t(s.OC) * s.C, dev),
        db(MemTag::workspace, s.OC, dev);
    fill_random(be, inp, 1);
    fill_random(be, w, 2);
    fill_random(be, bias, 3);
    const bool has_bias = s.bias;
    double best = 1e30;
    for (int r = 0; r < reps + 1; ++r) {
      auto t0 = Clock::now();
      op.matmul_forward(out.data(), inp.data(), w.data(), has_bias ? bias.data() : nullptr, N, s.C, s.OC);
      op.matmul_backward(dinp.data(), dw.data(), has_bias ? db.data() : nullptr, out.data(), inp.data(), w.data(),
                         N, s.C, s.OC);
      be.synchronize();
      const double dt = seconds_since(t0);
      if (r > 0) best = std::min(best, dt);  // the first run warms caches and threads
    }
    total += best * s.count;
  }
  return total;
}

std::vector<int> parse_ints(const std::string& s, const char* flag) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    char* rest = nullptr;
    long v = std::strtol(item.c_str(), &rest, 10);
    RZ_CHECK(!item.empty() && *rest == '\0', "%s: expected a comma-separated list of thread counts, found '%s'", flag,
             s.c_str());
    check_thread_count(v, flag);
    out.push_back(int(v));
    pos = end + 1;
  }
  return out;
}

struct StepBenchArgs {
  std::string preset = "d12", config_path, threads_s = "1,2", precisions_s = "fp32,bf16";
  // The shape keys, --batch, --seq, --device, --attention, --lr, --weight-decay and
  // --grad-clip: rows of train's settings table (lr: the constant rate of every step).
  TrainConfig settings = [] {
    TrainConfig c;
    c.lr = 3e-4;
    return c;
  }();
  int untimed = 1, steps = 3;
  bool ops = false;
};

// bench-step's flags into a.
void add_bench_step_flags(CLI::App& app, StepBenchArgs& a) {
  TrainConfig& settings = a.settings;
  app.add_option("--model", a.preset, "model preset (tiny, d2, d4, d6, d12, d24, d36, d48)")->capture_default_str();
  app.add_option("--config", a.config_path, "training config (TOML) whose model shape, batch and seq to bench");
  // The shape keys override the preset / config.
  add_setting_flag(app, settings, "layers", {})->check(CLI::Range(0, 1000));
  add_setting_flag(app, settings, "channels", {})->check(CLI::Range(0, 1 << 16));
  add_setting_flag(app, settings, "heads", {})->check(CLI::Range(0, 1024));
  add_setting_flag(app, settings, "vocab", {})->check(CLI::Range(0, 1 << 24));
  add_setting_flag(app, settings, "max_seq", {})->check(CLI::Range(0, 1 << 20));
  add_setting_flag(app, settings, "batch", {})->check(CLI::Range(1, 4096));
  add_setting_flag(app, settings, "seq", {})->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", a.threads_s, "comma-separated thread counts")->capture_default_str();
  app.add_option("--precision", a.precisions_s, "comma-separated precisions: fp32, bf16")->capture_default_str();
  add_setting_flags(app, settings, {"device"});
  add_number(app, "--untimed-steps", a.untimed, "steps run before the timed ones (not timed)")
      ->capture_default_str()->check(CLI::Range(0, 1000));
  refuse_renamed_warmup(app, "bench-step");
  add_number(app, "--steps", a.steps, "timed steps (the median is reported)")->capture_default_str()->check(CLI::Range(1, 1000));
  add_setting_flags(app, settings, {"attention", "lr", "weight_decay", "grad_clip"});
  app.add_flag("--ops", a.ops, "also print the step's time split by kernel family (a replay of its kernel calls)");
}

int run_bench_step(int argc, char** argv) {
  StepBenchArgs a;
  auto& [preset, config_path, threads_s, precisions_s, settings, untimed, steps, ops] = a;
  CLI::App app{
      "Benchmark one training step on the CPU or a GPU: forward + backward + train's optimizer step\n"
      "(opt: the strategy's step on one rank: gradient clipping (--grad-clip) and AdamW (--weight-decay)\n"
      "at the constant rate --lr) of a model shape at (--batch, --seq), for each thread count and precision. Prints a markdown table: median step\n"
      "time (wall, and the process's CPU time: on a busy shared machine the 1-thread CPU time is the\n"
      "robust figure) and its phases, tokens/s, the step's GFLOP/s (6 x params + 12 x L x C x T per\n"
      "token, as llm.c counts), and the GFLOP/s of the step's matmuls run alone through the same backend\n"
      "(the CPU matmul kernels: gemm_f32 or Eigen; cuBLASLt on a GPU) in the same precision, with their ratio (on a GPU: the MFU\n"
      "against the GEMM rate measured in the same run).\n"
      "The shape: --model's preset, then --config's model keys, batch and seq (and its lr, weight_decay and\n"
      "grad_clip), then the flags.\n"
      "--ops adds the step's CPU time split by kernel family (CPU kernels).",
      "ringzero bench-step"};
  add_bench_step_flags(app, a);
  if (!parse_command_line(app, argc, argv)) return 0;
  const Device device = settings.device.device();
  RZ_CHECK(!ops || settings.attention == Attention::materialized,
           "--ops: the kernel split replays the materialized attention only (drop --ops or --attention flash)");
  RZ_CHECK(!ops || device.is_cpu(), "--ops: the kernel split is measured on the CPU only (drop --ops or use --device cpu)");
  GPT2Config cfg = model_preset(preset);
  if (!config_path.empty()) {
    TrainConfig tc;
    load_config_toml(tc, config_path);
    cfg = config_model_shape(tc);
    preset = std::filesystem::path(config_path).stem().string();
    // The config's values where no flag was given.
    for (const char* key : {"batch", "seq", "lr", "weight_decay", "grad_clip"})
      if (settings.origins.count(key) == 0) set_config_value(settings, key, get_config_value(tc, key));
  }
  const int B = settings.batch, T = settings.seq;
  cfg = override_shape(cfg, {.layers = settings.layers, .channels = settings.channels, .heads = settings.heads,
                             .vocab = settings.vocab, .max_seq = settings.max_seq});
  finalize_config(cfg);
  RZ_CHECK(!ops || cfg.family == ModelFamily::gpt2,
           "--ops: the kernel split replays GPT-2's step (cli/step_profile.h); the %s family's is not written (drop --ops)",
           family_name(cfg.family));
  RZ_CHECK(T <= cfg.max_seq_len, "--seq %d exceeds the model's maxT %d", T, cfg.max_seq_len);
  const std::vector<int> threads = parse_ints(threads_s, "--threads");
  std::vector<Precision> precisions;
  for (size_t pos = 0; pos <= precisions_s.size();) {
    size_t end = precisions_s.find(',', pos);
    if (end == std::string::npos) end = precisions_s.size();
    precisions.push_back(parse_precision(precisions_s.substr(pos, end - pos)));
    pos = end + 1;
  }
  if (device.is_cpu()) {
    // What the step holds (one rank's ddp: parameters, gradients, AdamW m and v, bf16's
    // master copy; activations; kernel scratch) and the largest of time_gemms' operand sets,
    // against this machine's memory, before anything is allocated (zero/memory/plan.h).
    int most_threads = 1;
    for (int nt : threads) most_threads = std::max(most_threads, nt);
    const double N = double(B) * T, C = cfg.channels, Vp = cfg.padded_vocab_size;
    for (Precision prec : precisions) {
      const double esz = double(precision_bytes(prec));
      const double gemm_bytes = esz * std::max(N * (2 * C + 4 * C) + 2 * 4 * C * C + 8 * C,
                                               N * (2 * C + Vp) + 2 * Vp * C + 2 * Vp);
      MemoryPlanInput in;
      in.cfg = cfg;
      in.precision = prec;
      in.attention = settings.attention;
      in.kind = StrategyKind::ddp;
      in.batch = B;
      in.seq = T;
      in.threads = most_threads;
      check_fits_host_memory(in, 1, gemm_bytes, "bench-step",
                             "a smaller --batch, --seq or model (`ringzero memory` plans any shape)");
    }
  }
  const double P = double(num_parameters(cfg)), tokens = double(B) * T;
  const double step_flops = tokens * (6.0 * P + 12.0 * cfg.num_layers * cfg.channels * double(T));
  const double C = cfg.channels;
  const double gemm_flops = 6.0 * tokens *
                            (C * (cfg.qkv_width() + C + cfg.fc_width() + cfg.intermediate) * cfg.num_layers +
                             C * cfg.padded_vocab_size);
  std::printf("bench-step on %s: %s (L=%d C=%d NH=%d V=%d, %.1fM params%s), B=%d T=%d, %d untimed + %d timed steps (median)\n",
              device_name(device).c_str(), preset.c_str(), cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size,
              P / 1e6, cfg.family == ModelFamily::gpt2 ? "" : (", " + describe_shape(cfg)).c_str(), B, T, untimed, steps);
  std::printf("step FLOPs %.3g (6 x params x tokens + attention), of which matmuls %.3g\n\n", step_flops, gemm_flops);
  std::printf("| model | precision | threads | step ms | step CPU ms | fwd ms | bwd ms | opt ms | tok/s | step GFLOP/s | GEMM alone GFLOP/s | step / GEMM |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const RankPlacement at = place_rank(settings.device, RankEnv{}, CommBackend::ring);  // one process, every model
  for (int nt : threads) {
    omp_set_num_threads(nt);
    Eigen::setNbThreads(nt);
    for (Precision prec : precisions) {
      ModelOptions mo{prec, Recompute::none, at.device};
      mo.backend = at.backend;
      mo.attention = settings.attention;
      GPT2 model(cfg, mo);
      model.init_random(1);
      const double gemm_s = prec == Precision::fp32 ? time_gemms<float>(model.backend(), cfg, B * T, 3)
                                                    : time_gemms<bf16>(model.backend(), cfg, B * T, 3);
      const double gemm_rate = gemm_flops / gemm_s / 1e9;
      const StepTimes st = time_steps(model, settings, B, T, untimed, steps);
      const double rate = step_flops / st.total() / 1e9;
      std::printf("| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.2f | %.2f | %.0f%% |\n", preset.c_str(),
                  precision_name(prec), nt, st.total() * 1e3, st.cpu * 1e3, st.fwd * 1e3, st.bwd * 1e3, st.opt * 1e3,
                  tokens / st.total(), rate, gemm_rate, 100.0 * rate / gemm_rate);
      std::fflush(stdout);
    }
  }
  if (ops) {
    for (int nt : threads) {
      omp_set_num_threads(nt);
      Eigen::setNbThreads(nt);
      for (Precision prec : precisions) {
        const std::vector<OpTime> split = profile_step_ops(cpu_backend(), cfg, prec, B, T, untimed, steps);
        double total = 0;
        for (const OpTime& o : split) total += o.fwd_ms + o.bwd_ms;
        std::printf("\nstep split by kernel (%s, %d thread%s; process CPU ms in a replay of the step's kernel calls, median of %d): %.1f ms\n\n",
                    precision_name(prec), nt, nt == 1 ? "" : "s", steps, total);
        std::printf("| kernel | fwd CPU ms | bwd CPU ms | total CPU ms | share |\n|---|---:|---:|---:|---:|\n");
        for (const OpTime& o : split)
          std::printf("| %s | %.2f | %.2f | %.2f | %.1f%% |\n", o.op.c_str(), o.fwd_ms, o.bwd_ms, o.fwd_ms + o.bwd_ms,
                      100.0 * (o.fwd_ms + o.bwd_ms) / total);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

const RegisterCommand kRegister{Command{"bench-step", "benchmark one training step (forward, backward, AdamW)",
                                        run_bench_step, 90}};

}  // namespace
}  // namespace rz
