// tests/zero_harness.h: N ranks as threads, each with its own tiny model (GPT-2's tiny
// preset unless the spec names another shape, e.g. llama-tiny) and strategy,
// trained for a few steps on batches whose tokens depend only on (step, global row), so
// any split of the global batch over ranks and micro-steps sees the same data.
#pragma once

#include <omp.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/factory.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "zero/strategy.h"

namespace rz::test {

struct RunSpec {
  int nranks = 2;
  StrategyKind kind = StrategyKind::ddp;
  Precision precision = Precision::fp32;
  int steps = 10;
  int accum = 1;      // micro-steps per step
  int B = 2, T = 16;  // per rank, per micro-step
  double bucket_mb = 0.02;
  int buckets_in_flight = 2;
  float grad_clip = 1.0f;
  bool buckets_per_unit = false;  // cut buckets at zero3's units (to compare others with zero3)
  bool grad_reduce_fp32 = false;  // bf16: gradient buckets reduced in fp32 (zero/wide_reduce.h)
  // The step gate of every rank (zero/strategy.h): gate(rank, step, grad_norm); empty: none.
  std::function<bool(int, int, double)> gate;
  ModelConfig config = model_preset("tiny");  // the model every rank trains
  // A traits row to compose instead of kind's (make_strategy's second form); null: kind's row.
  const StrategyTraits* row = nullptr;
};

struct RunResult {
  std::vector<std::vector<float>> params;  // per rank, fp32, layout order
  std::vector<std::vector<float>> norms;   // per rank, per step
  std::vector<std::vector<float>> losses;  // per rank, per step (mean over micro-steps)
  std::vector<std::vector<int>> skipped;   // per rank, per step: StepStats::skipped
};

// Token of global row `row` (of the whole step's batch), position t. Two batches
// alternate, so a few steps visibly lower the loss.
inline int token_at(int step, int row, int t, int vocab) {
  uint32_t x = static_cast<uint32_t>((step % 2) * 7919 + row * 104729 + t * 31 + 17);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<int>(x % static_cast<uint32_t>(vocab));
}

inline GPT2Config tiny_config() { return model_preset("tiny"); }

// Runs the spec; rank r of micro-step m takes global rows ((m * N) + r) * B .. + B.
// `hook(rank, strategy, stats, comm, model)` runs on each rank's thread after the first
// step, before the others (it may issue collectives: every rank runs it).
template <typename Hook>
RunResult run_ranks_with_comm(const RunSpec& spec, Hook hook) {
  const int N = spec.nranks;
  CommOptions copts;
  copts.transport = CommTransport::thread;
  copts.timeout_s = 60.0;
  auto comms = make_thread_communicators(N, copts);
  const GPT2Config cfg = spec.config;
  ModelOptions mopts;
  mopts.precision = spec.precision;
  std::vector<std::unique_ptr<GPT2>> models;
  std::vector<std::unique_ptr<Strategy>> strategies;
  StrategyOptions sopts;
  sopts.kind = spec.kind;
  sopts.bucket_mb = spec.bucket_mb;
  sopts.buckets_in_flight = spec.buckets_in_flight;
  sopts.grad_clip = spec.grad_clip;
  sopts.buckets_per_unit = spec.buckets_per_unit;
  sopts.grad_reduce_fp32 = spec.grad_reduce_fp32;
  for (int r = 0; r < N; ++r) {
    models.push_back(std::make_unique<GPT2>(cfg, mopts));
    models.back()->init_random(1234);
    strategies.push_back(spec.row != nullptr ? make_strategy(*models.back(), *comms[r], sopts, *spec.row)
                                             : make_strategy(*models.back(), *comms[r], sopts));
  }
  RunResult res;
  res.params.resize(N);
  res.norms.resize(N);
  res.losses.resize(N);
  res.skipped.resize(N);
  std::vector<std::exception_ptr> errors(N);
  std::vector<std::thread> threads;
  for (int r = 0; r < N; ++r) {
    threads.emplace_back([&, r] {
      try {
        omp_set_num_threads(1);
        GPT2& model = *models[r];
        Strategy& st = *strategies[r];
        const int B = spec.B, T = spec.T, V = cfg.vocab_size;
        std::vector<int> in(B * T), tg(B * T);
        int gate_step = 0;
        if (spec.gate) st.set_step_gate([&](double norm) { return spec.gate(r, gate_step, norm); });
        for (int step = 0; step < spec.steps; ++step) {
          gate_step = step;
          float loss = 0.0f;
          for (int m = 0; m < spec.accum; ++m) {
            for (int b = 0; b < B; ++b) {
              int row = (m * N + r) * B + b;
              for (int t = 0; t < T; ++t) {
                in[b * T + t] = token_at(step, row, t, V);
                tg[b * T + t] = token_at(step, row, t + 1, V);
              }
            }
            loss += model.forward(in.data(), tg.data(), B, T) / spec.accum;
            model.backward(st.begin_micro_step(m, spec.accum), 1.0f / spec.accum);
            st.end_micro_step();
          }
          StepStats s = st.step(1e-3f);
          res.norms[r].push_back(s.grad_norm);
          res.losses[r].push_back(loss);
          res.skipped[r].push_back(s.skipped ? 1 : 0);
          if (step == 0) hook(r, st, s, *comms[r], model);
        }
        res.params[r].resize(model.layout().total);
        st.checkpoint_state().params_f32(res.params[r].data());  // collective (zero3 gathers)
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return res;
}

template <typename Hook>
RunResult run_ranks(const RunSpec& spec, Hook hook) {
  return run_ranks_with_comm(spec, [&](int r, Strategy& st, const StepStats& s, Communicator&, GPT2&) {
    hook(r, st, s);
  });
}

inline RunResult run_ranks(const RunSpec& spec) {
  return run_ranks(spec, [](int, Strategy&, const StepStats&) {});
}

}  // namespace rz::test
