// Tests of `ringzero memory` (through the binary: the seed article's (docs/comm.md) and the ZeRO paper's
// numbers) and of the per-rank memory report gathered on thread ranks.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "zero/memory/report.h"
#include "zero/sharded_params.h"
#include "run_ringzero.h"
#include "zero_harness.h"

using namespace rz;
using namespace rz::test;

// Runs `ringzero <args>` with a 60 s limit; returns its output, sets rc.
static std::string run_binary(const std::string& args, int& rc) {
  BinaryRun r = run_ringzero(args, 60);
  rc = r.status;
  return r.output;
}

static double states(const nlohmann::json& j, const std::string& strategy, int n, const char* key) {
  for (const auto& r : j["rows"])
    if (r["strategy"] == strategy && r["nranks"] == n) return r[key].get<double>();
  FAIL("no row for " << strategy << " N=" << n);
  return 0;
}

TEST_CASE("ringzero memory reproduces 112 GB for 7B bf16 DDP and the ZeRO paper's 7.5B at N = 64") {
  int rc = 0;
  std::string out = run_binary("memory --params 7e9 --precision bf16 --strategy ddp", rc);
  REQUIRE(rc == 0);
  CHECK(out.find("112.0 GB") != std::string::npos);

  out = run_binary("memory --params 7.5e9 --nranks 64 --precision bf16 --json", rc);
  REQUIRE(rc == 0);
  auto j = nlohmann::json::parse(out);
  CHECK(states(j, "ddp", 64, "model_states_paper_bytes") == Approx(120e9));
  CHECK(states(j, "zero1", 64, "model_states_paper_bytes") / 1e9 == Approx(31.4).margin(0.05));
  CHECK(states(j, "zero2", 64, "model_states_paper_bytes") / 1e9 == Approx(16.6).margin(0.05));
  // ringzero's zero2 keeps the paper's bf16 gradient shard: 2 + 2/64 + 12/64 bytes/param.
  CHECK(states(j, "zero2", 64, "model_states_bytes") == Approx(7.5e9 * (2 + 14.0 / 64)));

  out = run_binary("memory --params 7.5e9 --nranks 64 --precision bf16", rc);
  CHECK(out.find("120.0 GB") != std::string::npos);
  CHECK(out.find("31.4 GB") != std::string::npos);
  CHECK(out.find("16.6 GB") != std::string::npos);

  // The default table: N = 1, 2, 4, 8, 64 for each strategy.
  out = run_binary("memory --params 7e9", rc);
  for (const char* col : {"N=1", "N=2", "N=4", "N=8", "N=64"}) CHECK(out.find(col) != std::string::npos);
}

TEST_CASE("ringzero memory with a model shape adds staging and activations") {
  int rc = 0;
  std::string out = run_binary("memory --model tiny --nranks 2 --batch 4 --precision fp32 --json", rc);
  REQUIRE(rc == 0);
  auto j = nlohmann::json::parse(out);
  ModelOptions mo;
  size_t act = GPT2::activation_bytes(model_preset("tiny"), mo, 4, 64);
  for (const auto& r : j["rows"]) {
    CHECK(r["activation_bytes"].get<double>() == double(act));
    if (r["strategy"] == "zero2") CHECK(r["staging_bytes"].get<double>() > 0);
    if (r["strategy"] == "ddp") CHECK(r["staging_bytes"].get<double>() == 0);
  }
  CHECK(j["params"].get<double>() == double(build_param_layout(model_preset("tiny")).total));
}

TEST_CASE("ringzero memory rejects bad input with one line") {
  int rc = 0;
  std::string out = run_binary("memory --params 7e9 --model d12", rc);
  CHECK(rc != 0);
  CHECK(out.find("--params") != std::string::npos);
  out = run_binary("memory", rc);
  CHECK(rc != 0);
  out = run_binary("memory --params -3", rc);
  CHECK(rc != 0);
  out = run_binary("memory --model nosuch", rc);
  CHECK(rc != 0);
  CHECK(out.find("nosuch") != std::string::npos);
  out = run_binary("memory --params 1e9 --no-such-flag", rc);
  CHECK(rc != 0);
}

TEST_CASE("the memory report gathers every rank's counters next to the formula") {
  RunSpec spec;
  spec.nranks = 2;
  spec.steps = 1;
  spec.kind = StrategyKind::zero2;
  spec.precision = Precision::bf16;
  std::vector<MemoryReport> reports(2);
  // Reports are gathered inside the run (a collective), right after step 1.
  run_ranks_with_comm(spec, [&](int r, Strategy& st, const StepStats& s, Communicator& comm, GPT2& model) {
    reports[r] = gather_memory_report(comm, model, st);
    CHECK(s.comm_bytes_sent > 0);
  });
  const MemoryReport& rep = reports[0];
  REQUIRE(rep.ranks.size() == 2);
  CHECK(rep.transport == "thread");
  CHECK(rep.formula.total() == Approx(2 + 2.0 / 2 + 12.0 / 2));
  CHECK(rep.paper.total() == Approx(2 + 2.0 / 2 + 12.0 / 2));
  // Thread ranks share the tracker, so both rows read the same process-wide counters.
  CHECK(rep.ranks[0].peak[static_cast<int>(MemTag::grads)] >= 2 * rep.expected.grads);
  CHECK(rep.ranks[1].current[static_cast<int>(MemTag::master)] ==
        rep.ranks[0].current[static_cast<int>(MemTag::master)]);
  auto j = memory_report_json(rep);
  CHECK(j["ranks"].size() == 2);
  CHECK(j["strategy"] == "zero2");
  CHECK(j["expected_bytes"]["comm_staging"].get<size_t>() == rep.expected.staging);
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  print_memory_report(rep, f);
  std::fclose(f);
  std::string text(buf, len);
  free(buf);
  CHECK(text.find("rank 1 cur / peak") != std::string::npos);
  CHECK(text.find("reserved for the wte bucket") != std::string::npos);
}

// Real processes over the shm transport (the launcher and `bench-strategies`): fp32
// without accumulation, the four strategies end with bitwise-equal params (same hash),
// on 2 and 3 ranks, on zero3's buckets (--buckets-per-unit).
TEST_CASE("ddp, zero1, zero2 and zero3 are bitwise equal across processes (shm)") {
  for (int n : {2, 3}) {
    int rc = 0;
    std::string out = run_binary(
        "bench-strategies --model tiny --nproc " + std::to_string(n) +
            " --transport shm --steps 10 --untimed-steps 0 --batch 2 --seq 16 --bucket-mb 0.02 --buckets-per-unit",
        rc);
    INFO(out);
    REQUIRE(rc == 0);
    std::vector<std::string> hashes;
    size_t pos = 0;
    while ((pos = out.find("hash ", pos)) != std::string::npos) {
      hashes.push_back(out.substr(pos + 5, 16));
      pos += 5;
    }
    REQUIRE(hashes.size() == 4);
    CHECK(hashes[0] == hashes[1]);
    CHECK(hashes[0] == hashes[2]);
    CHECK(hashes[0] == hashes[3]);
  }
}

namespace {

// Stands in for rank 0 of an N-rank job while strategies are only constructed: the
// constructors allocate every buffer they will ever hold but communicate nothing.
class ConstructOnlyComm final : public Communicator {
 public:
  explicit ConstructOnlyComm(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  std::string transport_name() const override { return "none"; }
  void all_reduce(void*, size_t, DType, ReduceOp) override { no(); }
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override { no(); }
  void all_gather(const void*, void*, size_t, DType) override { no(); }
  void broadcast(void*, size_t, DType, int) override { no(); }
  void barrier() override { no(); }
  WorkHandle all_reduce_async(void*, size_t, DType, ReduceOp, OnDone) override { no(); }
  WorkHandle reduce_scatter_async(const void*, void*, size_t, DType, ReduceOp, OnDone) override { no(); }
  WorkHandle all_gather_async(const void*, void*, size_t, DType, OnDone) override { no(); }
  WorkHandle broadcast_async(void*, size_t, DType, int, OnDone) override { no(); }
  const CommStats& stats() const override { return stats_; }
  void reset_stats() override {}

 private:
  [[noreturn]] static void no() { RZ_FAIL("ConstructOnlyComm: no collectives in this test"); }
  int n_;
  CommStats stats_;
};

// Bytes of gradients, optimizer state and staging one rank's strategy holds (measured by
// the tracker, not computed from the formula).
// zero3 takes the model's parameters over (and leaves it without them when it goes), so it
// is measured on a model of its own.
size_t measured_state_bytes(GPT2& model, StrategyKind kind, int nranks, double bucket_mb) {
  const MemoryTracker& mt = MemoryTracker::global();
  auto held = [&] {
    size_t s = 0;
    for (MemTag t : {MemTag::grads, MemTag::master, MemTag::adam_m, MemTag::adam_v, MemTag::comm})
      s += mt.current(t);
    return s;
  };
  const size_t before = held();
  ConstructOnlyComm comm(nranks);
  StrategyOptions so;
  so.kind = kind;
  so.bucket_mb = bucket_mb;
  auto st = make_strategy(model, comm, so);
  return held() - before;
}

}  // namespace

TEST_CASE("measured per-rank gradient + optimizer + staging bytes: zero3 <= zero2 <= zero1 <= ddp") {
  struct Case {
    const char* preset;
    std::vector<int> nranks;
    std::vector<double> bucket_mb;
  };
  // d12 (124M parameters) at the ends of the bucket range for N = 2 and at 1 MiB for
  // N = 3, 4: each strategy allocates (and the kernel zeroes) ~1.5 GB there, which is most
  // of this test's time.
  for (const Case& c : {Case{"tiny", {2, 3, 4}, {0.25, 1.0, 25.0}}, Case{"d4", {2, 3, 4}, {0.25, 1.0, 25.0}},
                        Case{"d12", {2}, {0.25, 25.0}}, Case{"d12", {3, 4}, {1.0}}}) {
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
      GPT2 model(model_preset(c.preset), ModelOptions{prec});
      for (int n : c.nranks) {
        for (double mb : c.bucket_mb) {
          INFO(c.preset << " " << precision_name(prec) << " N=" << n << " bucket_mb=" << mb);
          const size_t ddp = measured_state_bytes(model, StrategyKind::ddp, n, mb);
          const size_t z1 = measured_state_bytes(model, StrategyKind::zero1, n, mb);
          const size_t z2 = measured_state_bytes(model, StrategyKind::zero2, n, mb);
          GPT2 own(model_preset(c.preset), ModelOptions{prec});
          const size_t z3 = measured_state_bytes(own, StrategyKind::zero3, n, mb);
          UNSCOPED_INFO("ddp " << ddp << " zero1 " << z1 << " zero2 " << z2 << " zero3 " << z3);
          CHECK(z3 <= z2);
          CHECK(z2 <= z1);
          CHECK(z1 <= ddp);
        }
      }
    }
  }
}

TEST_CASE("zero3's measured parameter, gradient and optimizer bytes equal its formula") {
  const MemoryTracker& mt = MemoryTracker::global();
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    for (int n : {2, 3, 4}) {
      for (double mb : {0.02, 25.0}) {
        INFO(precision_name(prec) << " N=" << n << " bucket_mb=" << mb);
        GPT2 model(model_preset("d4"), ModelOptions{prec});
        std::array<size_t, kNumMemTags> before{};
        for (int t = 0; t < kNumMemTags; ++t) before[t] = mt.current(static_cast<MemTag>(t));
        ConstructOnlyComm comm(n);
        StrategyOptions so;
        so.kind = StrategyKind::zero3;
        so.bucket_mb = mb;
        auto st = make_strategy(model, comm, so);
        auto held = [&](MemTag t) { return mt.current(t) - before[static_cast<int>(t)]; };
        const ExactStateBytes e = exact_state_bytes(st->bucket_plan(), StrategyKind::zero3, prec, st->grad_sync().staging_pool(),
                                                    false, st->param_store().gather_pool());
        const size_t P = model.layout().total, pb = precision_bytes(prec);
        // The model's full parameter buffer is gone; the owned shard and the gathered units remain.
        CHECK(mt.current(MemTag::params) + P * pb - before[static_cast<int>(MemTag::params)] == e.params);
        CHECK(held(MemTag::grads) == e.grads);
        CHECK(held(MemTag::master) == e.master);
        CHECK(held(MemTag::adam_m) == e.adam_m);
        CHECK(held(MemTag::adam_v) == e.adam_v);
        CHECK(held(MemTag::comm) == e.staging);
        // 16/N bytes per parameter (padding aside) plus the working set: the embeddings and two layers.
        const double per_param = ringzero_formula(StrategyKind::zero3, prec, n).total();
        CHECK(per_param == Approx(16.0 / n));
        const double states = double(e.total() - e.staging - e.gathered);
        CHECK(states >= per_param * double(P));
        CHECK(states <= per_param * double(P) * 1.001);
        // `ringzero memory` and the planner predict it without building it.
        const ExactStateBytes pred = predicted_state_bytes(model.layout(), model.config().num_layers, StrategyKind::zero3,
                                                           prec, n, mb, so.buckets_in_flight);
        CHECK(pred.total() == e.total());
        CHECK(pred.staging == e.staging);
        CHECK(pred.gathered == e.gathered);
        const GatherPool g = zero3_gather_pool(model.layout(), model.config().num_layers);
        CHECK(e.gathered == g.total_elems() * pb);
        CHECK(g.embedding_elems == model.layout().find(ParamKind::wte).numel + model.layout().find(ParamKind::wpe).numel);
      }
    }
  }
}

// Start-up and the optimizer-state getter go bucket by bucket: the tracker's peak over a
// strategy's construction is what the strategy keeps (no full-size fp32 temporary), and
// reading its state back for a checkpoint allocates nothing tracked.
TEST_CASE("no full-size temporaries at start-up or when reading the optimizer state") {
  MemoryTracker& mt = MemoryTracker::global();
  for (StrategyKind k : {StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3}) {
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
      INFO(strategy_name(k) << " " << precision_name(prec));
      GPT2 model(model_preset("d4"), ModelOptions{prec});
      model.init_random(1);
      const size_t before = mt.current_total();
      mt.reset_peaks();
      ConstructOnlyComm comm(2);
      StrategyOptions so;
      so.kind = k;
      so.bucket_mb = 0.25;
      auto st = make_strategy(model, comm, so);
      const ExactStateBytes e = exact_state_bytes(st->bucket_plan(), k, prec, st->grad_sync().staging_pool(), false,
                                                  st->param_store().gather_pool());
      const size_t kept = e.total() - (k == StrategyKind::zero3 ? 0 : e.params);  // the model's params were there before
      CHECK(mt.peak_total() - before <= kept);
      CHECK(mt.peak(MemTag::workspace) == mt.current(MemTag::workspace));
      const size_t after_init = mt.current_total();
      mt.reset_peaks();
      std::vector<float> master, m, v;
      st->checkpoint_state().get_optimizer_state(master, m, v);
      CHECK(mt.peak_total() == after_init);
      size_t owned = 0;
      for (auto [b, e2] : st->checkpoint_state().owned_ranges()) owned += e2 - b;
      CHECK(master.size() == owned);
      CHECK(m.size() == owned);
    }
  }
}
