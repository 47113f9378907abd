// --grad-reduce-dtype fp32 (zero/wide_reduce.h) and the step gate (zero/strategy.h) on thread
// ranks: bf16 runs whose buckets travel in fp32 agree bitwise across ddp, zero1 and zero2;
// at N = 2 the ring rounds once either way, so bf16 and fp32 reductions agree bitwise, at
// N = 4 they do not; the fp32 buffers are what the formula and `ringzero memory` predict;
// and a gate that refuses leaves the parameters and AdamW's step count alone on every rank.
// The bf16 matmuls run in fp32 here (RINGZERO_BF16_MATMUL=fp32): oneDNN's bf16 path is not
// yet deterministic under concurrent thread ranks (the helper fresh23 fixes that), and these
// checks are about the reduction.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "base/memory.h"
#include "zero/memory/formula.h"
#include "zero/wide_reduce.h"
#include "zero_harness.h"

using namespace rz;
using rz::test::RunSpec;
using rz::test::run_ranks;

namespace {

const bool kFp32Matmuls = [] { return setenv("RINGZERO_BF16_MATMUL", "fp32", 1) == 0; }();

RunSpec bf16_spec(StrategyKind k, int n, bool fp32_reduce) {
  RunSpec s;
  s.kind = k;
  s.nranks = n;
  s.precision = Precision::bf16;
  s.steps = 3;
  s.grad_reduce_fp32 = fp32_reduce;
  s.buckets_per_unit = true;  // zero3's buckets for everyone, so all four can be compared
  return s;
}

}  // namespace

TEST_CASE("bf16 with fp32 gradient reduction: ddp, zero1, zero2 and zero3 end bitwise equal") {
  REQUIRE(kFp32Matmuls);
  const auto ref = run_ranks(bf16_spec(StrategyKind::ddp, 3, true));
  for (StrategyKind k : {StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3}) {
    INFO(strategy_name(k));
    const auto got = run_ranks(bf16_spec(k, 3, true));
    for (int r = 0; r < 3; ++r) {
      CHECK(got.params[r] == ref.params[r]);
      CHECK(got.norms[r] == ref.norms[r]);
    }
  }
}

TEST_CASE("the ring rounds once at N = 2 (bf16 and fp32 reductions agree bitwise) and N - 1 times at N = 4") {
  for (StrategyKind k : {StrategyKind::ddp, StrategyKind::zero2}) {
    INFO(strategy_name(k));
    const auto b2 = run_ranks(bf16_spec(k, 2, false)), f2 = run_ranks(bf16_spec(k, 2, true));
    CHECK(b2.params[0] == f2.params[0]);
    const auto b4 = run_ranks(bf16_spec(k, 4, false)), f4 = run_ranks(bf16_spec(k, 4, true));
    CHECK(b4.params[0] != f4.params[0]);
    CHECK(b4.norms[0][0] != f4.norms[0][0]);
    // ... by rounding only: the same model to bf16 precision.
    double max_diff = 0;
    for (size_t i = 0; i < b4.params[0].size(); ++i)
      max_diff = std::max(max_diff, double(std::abs(b4.params[0][i] - f4.params[0][i])));
    CHECK(max_diff < 0.05);
    CHECK(std::abs(b4.norms[0][0] - f4.norms[0][0]) < 0.01 * f4.norms[0][0]);
  }
}

TEST_CASE("the fp32 reduce buffers are what wide_reduce_pool and predicted_state_bytes say, on every strategy") {
  const GPT2Config cfg = rz::test::tiny_config();
  for (StrategyKind k : kStrategyKinds) {
    INFO(strategy_name(k));
    auto comms = make_thread_communicators(1, CommOptions{});
    GPT2 model(cfg, ModelOptions{Precision::bf16, Recompute::none});
    model.init_random(1);
    GPT2 model2(cfg, ModelOptions{Precision::bf16, Recompute::none});  // zero3 takes a model's parameters over
    model2.init_random(1);
    StrategyOptions o;
    o.kind = k;
    o.bucket_mb = 0.02;
    o.buckets_in_flight = 3;
    const uint64_t before = MemoryTracker::global().current(MemTag::comm);
    auto plain = make_strategy(model, *comms[0], o);
    const uint64_t plain_comm = MemoryTracker::global().current(MemTag::comm) - before;
    CHECK(plain->grad_sync().wide_pool().buffers == 0);
    plain.reset();
    o.grad_reduce_fp32 = true;
    auto wide = make_strategy(model2, *comms[0], o);
    const uint64_t wide_comm = MemoryTracker::global().current(MemTag::comm) - before;
    const WidePool want = wide_reduce_pool(wide->bucket_plan(), 3);
    CHECK(want.buffers == 3);
    CHECK(want.elems == wide->bucket_plan().max_padded);
    CHECK(wide->grad_sync().wide_pool().bytes() == want.bytes());
    CHECK(wide_comm - plain_comm == want.bytes());
    const ExactStateBytes e = predicted_state_bytes(model.layout(), cfg.num_layers, k, Precision::bf16, 1, 0.02, 3,
                                                    false, nullptr, true);
    CHECK(e.wide == want.bytes());
    // fp32 runs have nothing to widen.
    CHECK(predicted_state_bytes(model.layout(), cfg.num_layers, k, Precision::fp32, 1, 0.02, 3, false, nullptr, true)
              .wide == 0);
  }
}

TEST_CASE("a step gate that refuses leaves parameters and AdamW's step alone, on every rank and strategy") {
  for (StrategyKind k : kStrategyKinds) {
    INFO(strategy_name(k));
    RunSpec one = bf16_spec(k, 2, false);
    one.precision = Precision::fp32;
    one.steps = 1;
    RunSpec gated = one;
    gated.steps = 3;
    gated.gate = [](int, int step, double norm) { return step == 0 && std::isfinite(norm) && norm > 0; };
    const auto a = run_ranks(one), b = run_ranks(gated);
    for (int r = 0; r < 2; ++r) {
      CHECK(b.skipped[r] == std::vector<int>({0, 1, 1}));
      CHECK(b.norms[r][1] > 0);  // the norm was measured all the same
      // Two refused steps after the first: the parameters are the one-step run's.
      CHECK(b.params[r] == a.params[r]);
    }
  }
}
