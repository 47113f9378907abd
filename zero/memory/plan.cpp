#include "zero/memory/plan.h"

#include <algorithm>

#include "base/check.h"
#include "base/host_memory.h"
#include "base/memory.h"
#include "comm/ring/ring.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/matmul_onednn.h"
#include "model/gpt2.h"
#include "model/layout.h"
#include "zero/buckets.h"

namespace rz {

namespace {

// The matmuls of one step, as (C_in, OC, has_bias): per layer qkv, attproj, fc, fcproj,
// then the classifier (no bias), with the family's widths and biases. N = B*T rows each.
struct MatmulShape {
  size_t in, out;
  bool bias;
};

// Bytes of the CPU kernels' per-thread scratch after one step (kernels/cpu/matmul.cpp's
// six fp32 slots of the rank's thread, grown to the largest use and kept; and
// kernels/cpu/attention.cpp's per-head fp32 buffer, one per OpenMP thread of the team).
size_t cpu_kernel_scratch(const MemoryPlanInput& in, int T) {
  const GPT2Config& c = in.cfg;
  const FamilyTraits& tr = family_traits(c.family);
  const size_t N = size_t(in.batch) * T, C = c.channels, hs = C / c.num_heads;
  size_t bytes = 0;
  if (in.precision == Precision::bf16) {
    const MatmulShape shapes[] = {{C, size_t(c.qkv_width()), tr.qkv_bias}, {C, C, tr.proj_bias},
                                  {C, size_t(c.fc_width()), tr.fc_bias}, {size_t(c.intermediate), C, tr.proj_bias},
                                  {C, size_t(c.padded_vocab_size), false}};
    const bool units = onednn_bf16_matmul_available();
    size_t slot[6] = {};
    auto use = [&slot](int i, size_t n) { slot[i] = std::max(slot[i], n); };
    for (const MatmulShape& m : shapes) {
      if (!units) {  // forward converts every operand to fp32
        use(0, N * m.in);
        use(1, m.out * m.in);
        use(2, N * m.out);
        if (m.bias) use(3, m.out);
      }
      if (!units) {
        use(0, N * m.out);     // backward: dout in fp32
        use(2, m.out * m.in);  // weight, then dweight
        use(3, N * m.in);      // dinp (every backward matmul has one: the classifier's is dlnf)
        use(1, N * m.in);      // inp
      }
      if (m.bias) use(4, m.out), use(5, m.out);  // dbias, from bf16 dout a row at a time
    }
    for (size_t s : slot) bytes += s * sizeof(float);
  }
  // Attention: backward's 7 (T, hs) + 2 (T, T) fp32 per thread is the larger of the two
  // uses; the flash path's blocks are (32, T) instead of (T, T). On the packed fp32 GEMM
  // each thread also keeps a head's packed K^T, V^T (hs, T) and K (T, hs) (backward's,
  // the larger use).
  const size_t rows = in.attention == Attention::flash ? 32 : size_t(T);
  size_t per_thread = 7 * size_t(T) * hs + 2 * rows * T;
  if (gemm_f32_available())
    per_thread += size_t(2 * gemm_f32_packed_floats(int64_t(hs), T) + gemm_f32_packed_floats(T, int64_t(hs)));
  bytes += size_t(std::max(1, in.threads)) * per_thread * sizeof(float);
  // Rotary families: rope's cos and sin table, (T, hs/2) fp32 each, kept by the rank's own
  // thread (kernels/cpu/rope.cpp).
  if (tr.position == PositionKind::rope) bytes += size_t(T) * hs * sizeof(float);
  return bytes;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  RZ_CHECK(in.batch >= 1, "batch: expected a positive micro-batch, found %d", in.batch);
  RZ_CHECK(in.nranks >= 1, "nranks: expected at least 1, found %d", in.nranks);
  const int T = in.seq > 0 ? in.seq : in.cfg.max_seq_len;
  const ParamLayout layout = build_param_layout(in.cfg);
  const size_t pb = precision_bytes(in.precision);
  const StrategyTraits& t = strategy_traits(in.kind);
  const BucketPlan plan = strategy_bucket_plan(layout, in.kind, in.precision, in.nranks, in.bucket_mb);
  MemoryPlan p;
  // The pools the strategy would build for that plan, zero3's gathered units included.
  p.states = predicted_state_bytes(plan, layout, in.cfg.num_layers, in.kind, in.precision, in.buckets_in_flight,
                                   in.grad_shard_fp32, nullptr, in.grad_reduce_fp32);
  ModelOptions mo{in.precision, in.recompute};
  mo.attention = in.attention;
  p.activations = GPT2::activation_bytes(in.cfg, mo, in.batch, T);
  if (grad_sync_kind(t) != GradSyncKind::all_reduce && in.nranks > 1) {
    // The ring's ReduceScatter work buffer (comm/ring/ring.h), grown to the largest
    // bucket's; AllReduce (ddp) and AllGather work in place.
    const size_t esz = in.grad_reduce_fp32 ? sizeof(float) : pb;
    for (const Bucket& b : plan.buckets)
      p.ring_work = std::max(p.ring_work, ring_scratch_bytes(b.padded, in.nranks, esz));
  }
  if (in.cpu) p.kernel_scratch = cpu_kernel_scratch(in, T);
  if (param_store_kind(t) == ParamStoreKind::sharded) {
    // The model's full parameter buffer exists until zero3 takes its shard over, and by
    // then zero3 has allocated all it keeps except AdamW's m and v, which it allocates
    // after the full buffer is gone (the strategy's start-up itself goes bucket by bucket,
    // with no full-size fp32 copy).
    p.startup = layout.total * pb + p.states.total() - p.states.adam_m - p.states.adam_v;
  }
  return p;
}

int largest_batch(MemoryPlanInput in, double budget, int max_batch) {
  in.batch = 1;
  if (double(plan_memory(in).peak()) > budget) return 0;
  // peak() grows with B: double, then bisect between the last fit and the first miss.
  int lo = 1, hi = 2;
  while (hi <= max_batch) {
    in.batch = hi;
    if (double(plan_memory(in).peak()) > budget) break;
    lo = hi;
    hi = hi > max_batch / 2 ? max_batch + 1 : hi * 2;
  }
  if (hi > max_batch) return lo;
  while (hi - lo > 1) {
    in.batch = lo + (hi - lo) / 2;
    (double(plan_memory(in).peak()) > budget ? hi : lo) = in.batch;
  }
  return lo;
}

void check_fits_host_memory(const MemoryPlanInput& in, int ranks_here, double extra_bytes, const char* what,
                            const char* hint) {
  const int T = in.seq > 0 ? in.seq : in.cfg.max_seq_len;
  // An upper estimate in doubles first (every layer's (B, T, C) tensors and (B, NH, T, T)
  // attention, the (B, T, Vp) logits, 20 bytes per parameter): the planner's 64-bit counts
  // would wrap for a shape that passes an exabyte.
  const double bt = double(in.batch) * T;
  const double upper = 4.0 * bt *
                           (64.0 * in.cfg.channels * in.cfg.num_layers + 2.0 * in.cfg.num_heads * in.cfg.num_layers * T +
                            2.0 * in.cfg.padded_vocab_size) +
                       20.0 * double(num_parameters(in.cfg));
  double per_rank = upper;
  std::string parts = "an upper estimate: the shape is too large to plan exactly";
  if (upper < 1e18) {
    const MemoryPlan p = plan_memory(in);
    per_rank = double(p.peak()) + extra_bytes;
    parts = strfmt("model states %s, activations %s, working %s%s", format_bytes(double(p.states.total())).c_str(),
                   format_bytes(double(p.activations)).c_str(), format_bytes(double(p.working())).c_str(),
                   extra_bytes > 0 ? strfmt(", besides %s", format_bytes(extra_bytes).c_str()).c_str() : "");
  }
  const double total = per_rank * ranks_here;
  const std::string planned =
      strfmt("%s per rank (%s)%s", format_bytes(per_rank).c_str(), parts.c_str(),
             ranks_here > 1 ? strfmt(" x %d ranks on this machine = %s", ranks_here, format_bytes(total).c_str()).c_str()
                            : "");
  check_host_memory(total, planned, what, hint);
}

}  // namespace rz
