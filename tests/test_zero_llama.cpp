// The strategies with the llama family (llama-tiny: RMSNorm, rope, SwiGLU, 4 query heads on 2
// kv heads, no biases), on thread ranks, held to GPT-2's equivalences (test_zero_strategies,
// test_zero3):
//   - fp32 without accumulation: ddp == zero1 == zero2 bitwise after 8 steps (N = 2, 3), tied
//     and untied; zero3 == ddp bitwise on zero3's buckets (cut at its units);
//   - bf16: zero3 == zero2 bitwise on the same buckets;
//   - with accumulation: zero2 within a small relative distance of ddp.
// (The planner against a real step's measured bytes: tests/test_train_llama.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "base/memory.h"
#include "model/layout.h"
#include "zero_harness.h"

using namespace rz;
using namespace rz::test;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void require_ranks_agree(const RunResult& r) {
  for (size_t k = 1; k < r.params.size(); ++k) REQUIRE(bitwise_equal(r.params[k], r.params[0]));
}

ModelConfig llama(bool tied) {
  ModelConfig c = model_preset("llama-tiny");
  c.tied = tied;
  return c;
}

}  // namespace

TEST_CASE("llama, fp32, no accumulation: ddp == zero1 == zero2 bitwise, tied and untied, N = 2 and 3") {
  for (bool tied : {true, false}) {
    for (int n : {2, 3}) {
      INFO((tied ? "tied" : "untied") << ", N = " << n);
      RunSpec spec;
      spec.config = llama(tied);
      spec.nranks = n;
      spec.steps = 8;
      spec.kind = StrategyKind::ddp;
      const RunResult ddp = run_ranks(spec);
      spec.kind = StrategyKind::zero1;
      const RunResult z1 = run_ranks(spec);
      spec.kind = StrategyKind::zero2;
      const RunResult z2 = run_ranks(spec);
      require_ranks_agree(ddp);
      require_ranks_agree(z1);
      require_ranks_agree(z2);
      REQUIRE(bitwise_equal(z1.params[0], ddp.params[0]));
      REQUIRE(bitwise_equal(z2.params[0], ddp.params[0]));
      REQUIRE(z2.norms[0] == ddp.norms[0]);
      REQUIRE(ddp.losses[0].back() < ddp.losses[0].front());  // it trains
    }
  }
}

TEST_CASE("llama: zero3 == ddp bitwise in fp32 on zero3's buckets; zero3 == zero2 bitwise in bf16") {
  for (bool tied : {true, false}) {
    for (double mb : {0.02, 1e-6}) {
      INFO((tied ? "tied" : "untied") << ", bucket_mb " << mb);
      RunSpec spec;
      spec.config = llama(tied);
      spec.nranks = 2;
      spec.steps = 5;
      spec.bucket_mb = mb;
      spec.buckets_per_unit = true;
      spec.kind = StrategyKind::ddp;
      const RunResult ddp = run_ranks(spec);
      spec.kind = StrategyKind::zero3;
      const RunResult z3 = run_ranks(spec);
      require_ranks_agree(z3);
      REQUIRE(bitwise_equal(z3.params[0], ddp.params[0]));
      REQUIRE(z3.losses[0] == ddp.losses[0]);
    }
  }
  RunSpec spec;
  spec.config = llama(false);
  spec.nranks = 2;
  spec.steps = 3;
  spec.precision = Precision::bf16;
  spec.buckets_per_unit = true;
  spec.kind = StrategyKind::zero2;
  const RunResult z2 = run_ranks(spec);
  spec.kind = StrategyKind::zero3;
  const RunResult z3 = run_ranks(spec);
  REQUIRE(bitwise_equal(z3.params[0], z2.params[0]));
}

TEST_CASE("llama with accumulation: zero2 stays within rounding of ddp") {
  RunSpec spec;
  spec.config = llama(false);
  spec.nranks = 2;
  spec.steps = 4;
  spec.accum = 2;
  spec.kind = StrategyKind::ddp;
  const RunResult ddp = run_ranks(spec);
  spec.kind = StrategyKind::zero2;
  const RunResult z2 = run_ranks(spec);
  double num = 0, den = 0;
  for (size_t i = 0; i < ddp.params[0].size(); ++i) {
    const double d = double(z2.params[0][i]) - ddp.params[0][i];
    num += d * d;
    den += double(ddp.params[0][i]) * ddp.params[0][i];
  }
  CHECK(std::sqrt(num / den) < 1e-5);
}
