// Tests of zero/buckets and zero/memory/formula: bucket cutting with known answers, shard
// ownership, and the model-state formulas against the seed article (docs/comm.md) and the ZeRO paper.
#include <catch2/catch.hpp>

#include <cmath>

#include "base/check.h"
#include "model/config.h"
#include "model/layout.h"
#include "zero/buckets.h"
#include "zero/memory/formula.h"
#include "zero/staged_grads.h"
#include "zero/strategy.h"

using namespace rz;

// A layout of tensors with the given sizes, all in one "layer" group each.
static ParamLayout toy_layout(const std::vector<size_t>& sizes) {
  ParamLayout lay;
  int i = 0;
  for (size_t n : sizes) {
    ParamTensor t{ParamKind::fcw, i++, "t", lay.total, n, {n}, true};
    lay.tensors.push_back(t);
    lay.total += n;
  }
  return lay;
}

static constexpr double kMiB = 1024.0 * 1024.0;

TEST_CASE("buckets take whole tensors greedily up to the cap") {
  // fp32, cap 100 elements: [30, 50] [40, 60] [150] [10]
  ParamLayout lay = toy_layout({30, 50, 40, 60, 150, 10});
  BucketPlan p = build_bucket_plan(lay, 400.0 / kMiB, 4, 1);
  REQUIRE(p.buckets.size() == 4);
  REQUIRE(p.buckets[0].begin == 0);
  REQUIRE(p.buckets[0].end == 80);
  REQUIRE(p.buckets[1].end == 180);
  REQUIRE(p.buckets[2].numel() == 150);  // bigger than the cap: a bucket of its own
  REQUIRE(p.buckets[3].numel() == 10);
  REQUIRE(p.buckets[3].first_tensor == 5);
  // N = 1 pads nothing; only the last bucket moves from 330 to 332, 16-byte aligned.
  REQUIRE(p.buckets[3].padded_offset == 332);
  REQUIRE(p.padded_total == lay.total + 2);
  REQUIRE(p.owned_numel() == lay.total);
  // The same cap in bf16 holds twice the elements.
  BucketPlan q = build_bucket_plan(lay, 400.0 / kMiB, 2, 1);
  REQUIRE(q.buckets.size() == 2);  // [30 50 40 60] [150 10]
  REQUIRE(q.buckets[0].end == 180);
  REQUIRE(q.buckets[1].numel() == 160);
}

TEST_CASE("buckets pad so N divides them, and shards partition each bucket") {
  ParamLayout lay = toy_layout({7, 5, 3, 11});
  for (int n : {1, 2, 3, 4, 8}) {
    BucketPlan p = build_bucket_plan(lay, 40.0 / kMiB, 4, n);  // cap 10 elements
    REQUIRE(p.buckets.size() == 3);  // 7 | 5 3 | 11
    size_t covered = 0, owned_before = 0;
    for (int b = 0; b < static_cast<int>(p.buckets.size()); ++b) {
      const Bucket& bk = p.buckets[b];
      REQUIRE(bk.padded % n == 0);
      REQUIRE(bk.padded >= bk.numel());
      REQUIRE(bk.padded - bk.numel() < static_cast<size_t>(n));
      REQUIRE(bk.shard * n == bk.padded);
      REQUIRE(bk.padded_offset % (kBucketAlignBytes / 4) == 0);  // 16 bytes of fp32
      REQUIRE(p.owned_offset(b) == owned_before);
      owned_before += bk.shard;
      for (int r = 0; r < n; ++r) {
        auto [lo, hi] = p.owned_layout_range(b, r);
        REQUIRE(lo == covered);
        covered = hi;
        // The communicator's shard of the unpadded bucket is the same range.
        ShardRange s{std::min(bk.numel(), r * bk.shard),
                     std::min(bk.numel(), (r + 1) * bk.shard) - std::min(bk.numel(), r * bk.shard)};
        REQUIRE(lo - bk.begin == s.offset);
        REQUIRE(hi - lo == s.count);
      }
    }
    REQUIRE(covered == lay.total);
    REQUIRE(p.owned_numel() == owned_before);
    REQUIRE(p.padded_total == p.buckets.back().padded_offset + p.buckets.back().padded);
  }
}

TEST_CASE("5 + 3 fits a cap of 10 and shares a bucket") {
  ParamLayout lay = toy_layout({7, 5, 3, 11});
  BucketPlan p = build_bucket_plan(lay, 40.0 / kMiB, 4, 3);
  // 7 + 5 = 12 > 10 closes the first bucket; 5 + 3 = 8 fits; 8 + 11 > 10 closes the second.
  REQUIRE(p.buckets.size() == 3);
  REQUIRE(p.buckets[1].num_tensors == 2);
  REQUIRE(p.buckets[1].padded == 9);
  REQUIRE(p.buckets[2].padded == 12);
  // Each bucket starts 16-byte aligned (4 fp32 elements): 0, 12 (after 9), 24 (after 12 + 9).
  REQUIRE(p.padded_total == 24 + 12);
  REQUIRE(p.padded_index(7) == 12);   // first element of bucket 1
  REQUIRE(p.padded_index(15) == 24);  // first element of bucket 2 (the 11)
  REQUIRE(p.owned_numel() == 3 + 3 + 4);
  REQUIRE(p.owned_offset(2) == 6);
  REQUIRE(p.bucket_of(14) == 1);
  REQUIRE(p.bucket_of(25) == 2);
}

TEST_CASE("bucket smaller than every tensor, and one bucket for everything") {
  ParamLayout lay = build_param_layout(model_preset("tiny"));
  BucketPlan tiny_cap = build_bucket_plan(lay, 1e-9, 4, 3);
  REQUIRE(tiny_cap.buckets.size() == lay.tensors.size());
  BucketPlan one = build_bucket_plan(lay, 1e6, 4, 3);
  REQUIRE(one.buckets.size() == 1);
  REQUIRE(one.buckets[0].padded == (lay.total + 2) / 3 * 3);
  // With one tensor per bucket, a backward unit (a weight and its bias) spans 2 buckets:
  // backward reports each pair ready right after its op, not a layer at a time.
  REQUIRE(min_buckets_in_flight(lay, tiny_cap) == 2);
  REQUIRE(min_buckets_in_flight(lay, one) == 1);
}

TEST_CASE("bad bucket sizes are one-line errors") {
  ParamLayout lay = toy_layout({4});
  REQUIRE_THROWS_WITH(build_bucket_plan(lay, 0.0, 4, 2), Catch::Contains("expected a bucket size in MiB > 0"));
  REQUIRE_THROWS_WITH(build_bucket_plan(lay, -1.0, 4, 2), Catch::Contains("expected a bucket size in MiB > 0"));
  REQUIRE_THROWS_WITH(build_bucket_plan(lay, NAN, 4, 2), Catch::Contains("expected a bucket size in MiB > 0"));
  REQUIRE_THROWS_AS(build_bucket_plan(lay, 1.0, 4, 0), Error);
  REQUIRE_THROWS_WITH(parse_strategy("zero4"), Catch::Contains("zero4"));
  REQUIRE(parse_strategy("zero3") == StrategyKind::zero3);
}

TEST_CASE("cut at units, every unit (layer, lnf, embeddings) is a run of whole buckets") {
  const GPT2Config cfg = model_preset("tiny");
  const ParamLayout lay = build_param_layout(cfg);
  const auto units = param_unit_ranges(lay, cfg.num_layers);
  REQUIRE(units.size() == size_t(cfg.num_layers) + 2);
  for (double mb : {1e-6, 0.05, 1e3}) {
    INFO("bucket_mb = " << mb);
    const BucketPlan cut = build_bucket_plan(lay, mb, 4, 3, true);
    for (auto [b, e] : units) {
      REQUIRE(cut.buckets[cut.bucket_of(b)].begin == b);
      REQUIRE(cut.buckets[cut.bucket_of(e - 1)].end == e);
    }
    // The cap still holds inside a unit; one huge bucket becomes one bucket per unit.
    if (mb == 1e3) REQUIRE(cut.buckets.size() == units.size());
    if (mb == 1e-6) REQUIRE(cut.buckets.size() == lay.tensors.size());
  }
  // zero3 keeps 16/N bytes per parameter of model states, as the ZeRO paper counts it.
  REQUIRE(paper_formula(StrategyKind::zero3, Precision::bf16, 8).total() == 2.0);
  REQUIRE(paper_formula(StrategyKind::zero3, Precision::fp32, 4).total() == 4.0);
}

// cuBLASLt is planned for the alignment a GEMM's shape allows (kernels/gemm_alignment.h),
// and each operand must meet it. A weight gradient sits at padded_index(offset) in ddp's and
// zero1's buffer and at (offset - bucket begin) in a zero2 staging buffer: both must be
// 16-byte aligned whenever C is, for every N, precision and bucket size, so that the three
// strategies run the same algorithm on the same numbers.
TEST_CASE("every gradient is 16-byte aligned in ddp's padded buffer and in zero2's staging") {
  GPT2Config odd = model_preset("tiny");
  odd.channels = 24;  // 96 bytes in fp32, 48 in bf16: still 16-byte aligned
  odd.num_heads = 3;
  finalize_config(odd);
  for (const GPT2Config& cfg : {model_preset("tiny"), model_preset("d2"), odd}) {
    const ParamLayout lay = build_param_layout(cfg);
    for (size_t es : {size_t(2), size_t(4)}) {
      REQUIRE(size_t(cfg.channels) * es % kBucketAlignBytes == 0);
      for (int n : {1, 2, 3, 4, 5}) {
        for (double mb : {1e-6, 0.01, 1e3}) {
          INFO("C " << cfg.channels << ", " << es << "-byte elements, N " << n << ", bucket_mb " << mb);
          const BucketPlan p = build_bucket_plan(lay, mb, es, n);
          for (const Bucket& bk : p.buckets) REQUIRE(bk.padded_offset * es % kBucketAlignBytes == 0);
          for (const ParamTensor& t : lay.tensors) {
            const Bucket& bk = p.buckets[p.bucket_of(t.offset)];
            REQUIRE(p.padded_index(t.offset) * es % kBucketAlignBytes == 0);  // ddp, zero1
            REQUIRE((t.offset - bk.begin) * es % kBucketAlignBytes == 0);     // zero2 staging
          }
        }
      }
    }
  }
}

TEST_CASE("model-state formulas match the seed article and the ZeRO paper") {
  // Seed article: 7B parameters, bf16 mixed precision, AdamW, DDP: 16 bytes/param = 112 GB.
  PerParamBytes ddp = paper_formula(StrategyKind::ddp, Precision::bf16, 8);
  REQUIRE(ddp.total() == 16.0);
  REQUIRE(7e9 * ddp.total() / 1e9 == Approx(112.0));
  // ZeRO paper, Figure 1: 7.5B parameters, N = 64: 120 GB, 31.4 GB, 16.6 GB.
  REQUIRE(7.5e9 * paper_formula(StrategyKind::ddp, Precision::bf16, 64).total() / 1e9 == Approx(120.0));
  REQUIRE(std::round(7.5e9 * paper_formula(StrategyKind::zero1, Precision::bf16, 64).total() / 1e8) ==
          314);
  REQUIRE(std::round(7.5e9 * paper_formula(StrategyKind::zero2, Precision::bf16, 64).total() / 1e8) ==
          166);
  // fp32 mode: the params are the master weights, so 4 + 4 + 8.
  REQUIRE(paper_formula(StrategyKind::ddp, Precision::fp32, 4).total() == 16.0);
  REQUIRE(paper_formula(StrategyKind::zero1, Precision::fp32, 4).total() == 4 + 4 + 2.0);
  REQUIRE(paper_formula(StrategyKind::zero2, Precision::fp32, 4).total() == 4 + 1 + 2.0);
  // ringzero's zero2 keeps the paper's 2/N gradient shard in bf16, or 4/N with the fp32 option.
  REQUIRE(ringzero_formula(StrategyKind::zero2, Precision::bf16, 4).grads == 0.5);
  REQUIRE(ringzero_formula(StrategyKind::zero2, Precision::bf16, 4, true).grads == 1.0);
  REQUIRE(paper_formula(StrategyKind::zero2, Precision::bf16, 4).grads == 0.5);
}

TEST_CASE("exact state bytes follow the plan's padding") {
  ParamLayout lay = toy_layout({7, 5, 3, 11});
  BucketPlan p = build_bucket_plan(lay, 40.0 / kMiB, 2, 3);  // bf16, cap 20 elems: [7 5 3] [11]
  REQUIRE(p.buckets.size() == 2);
  REQUIRE(p.buckets[0].padded == 15);
  REQUIRE(p.buckets[1].padded == 12);
  ExactStateBytes d = exact_state_bytes(p, StrategyKind::ddp, Precision::bf16, StagingPool{});
  REQUIRE(d.params == 26 * 2);
  REQUIRE(d.grads == (16 + 12) * 2);  // bucket 1 starts at element 16 (15 + 1 to align 16 bytes)
  REQUIRE(d.master == 26 * 4);
  REQUIRE(d.staging == 0);
  const StagingPool pool = zero2_staging_pool(lay, p, 2);
  REQUIRE(pool.general == 1);  // never more general buffers than buckets besides the last
  ExactStateBytes z = exact_state_bytes(p, StrategyKind::zero2, Precision::bf16, pool);
  REQUIRE(z.grads == 9 * 2);  // owned = 27 / 3, bf16 (the model's precision)
  REQUIRE(z.adam_m == 9 * 4);
  REQUIRE(exact_state_bytes(p, StrategyKind::zero2, Precision::bf16, pool, true).grads == 9 * 4);
  // staging: one general buffer of 15 (a pool never has more buffers than there are
  // buckets besides the last) + 12 reserved for the last bucket, bf16 (the reduce-scatter
  // is in place, so a buffer is one bucket).
  REQUIRE(z.staging == (15 + 12) * 2);
}
