// train/step.cpp: the timed step of train/step.h.
#include "train/step.h"

#include <vector>

#include "base/clock.h"
#include "base/trace.h"
#include "model/gpt2.h"

namespace rz {

StrategyOptions strategy_options(const TrainConfig& cfg, Precision precision) {
  StrategyOptions so;
  so.kind = cfg.strategy;
  so.bucket_mb = cfg.bucket_mb;
  so.buckets_in_flight = cfg.buckets_in_flight;
  so.grad_shard_fp32 = cfg.grad_shard_fp32;
  so.grad_reduce_fp32 = precision == Precision::bf16 && cfg.grad_reduce_dtype == "fp32";
  so.adamw.weight_decay = static_cast<float>(cfg.weight_decay);
  so.grad_clip = static_cast<float>(cfg.grad_clip);
  return so;
}

StepTimings timed_step(GPT2& model, Strategy& strategy, int B, int T, int accum, float lr, const MicroBatchFn& fill) {
  std::vector<int> inputs(size_t(B) * T), targets(inputs.size());
  StepTimings t;
  const double c0 = process_cpu_seconds();
  for (int micro = 0; micro < accum; ++micro) {
    fill(micro, inputs.data(), targets.data());
    auto t0 = Clock::now();
    {
      RZ_TRACE_SCOPE("forward");
      model.forward(inputs.data(), targets.data(), B, T);
    }
    t.fwd_s += seconds_since(t0);
    t0 = Clock::now();
    {
      RZ_TRACE_SCOPE("backward");
      model.backward(strategy.begin_micro_step(micro, accum), 1.0f / static_cast<float>(accum));
      strategy.end_micro_step();
    }
    model.backend().synchronize();
    t.bwd_s += seconds_since(t0);
  }
  auto t0 = Clock::now();
  {
    RZ_TRACE_SCOPE("optimizer (strategy.step: grad sync wait, clip, AdamW, param AllGather)");
    t.stats = strategy.step(lr);
  }
  model.backend().synchronize();
  t.opt_s = seconds_since(t0);
  t.cpu_s = process_cpu_seconds() - c0;
  return t;
}

}  // namespace rz
