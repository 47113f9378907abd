// Issue 28's training-side checks:
//   - the loss-spike guard (train/spike_guard.h): its z-score over a window of accepted
//     values; in real 2-rank runs it skips steps, counts them in the progress line and the
//     metrics, skips the same steps when the run is repeated, and ends a run that keeps
//     skipping with an error at max_consecutive_skips; off by default;
//   - --grad-reduce-dtype: the values it takes, the memory report's line for it, and
//     `ringzero memory`'s fp32 reduce buffers;
//   - comm-bench --check-precision on real gradients of a small model: at N = 2 the ring
//     rounds once (bf16 = one rounding), bf16 grows with N, fp32 stays near exact.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kernels/cpu/matmul_onednn.h"
#include "run_ringzero.h"
#include "train/spike_guard.h"

namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::quote;
using rz::test::run_ringzero;

namespace {

fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_guard_");
  return dir;
}

fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    uint64_t x = 99;
    for (int f = 0; f < 10; ++f) {
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 80; ++s) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out << "the ring " << (x >> 60) << " reduces bucket " << ((x >> 50) & 7) << " of rank " << ((x >> 40) & 3)
            << ".\n";
      }
    }
    const fs::path out = work_dir() / "data";
    auto r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --out " + quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

std::string tiny(const std::string& extra) {
  return "train --model tiny --data " + quote((data_dir() / "train_*.bin").string()) +
         " --batch 4 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05 --threads 1 " + extra;
}

std::vector<nlohmann::json> read_metrics(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("spike guard: the z-score is over the window of accepted values, and nothing is skipped until it is full") {
  rz::SpikeGuard g(4, 2.0);
  CHECK(std::isnan(g.zscore(1.0)));
  for (double v : {1.0, 2.0, 3.0}) {
    CHECK(!g.is_spike(100.0));  // the window is not full yet
    g.accept(v);
  }
  CHECK(!g.is_spike(1e9));
  g.accept(4.0);  // window 1 2 3 4: mean 2.5, sd sqrt(1.25)
  CHECK(g.zscore(2.5) == 0.0);
  CHECK(g.zscore(2.5 + std::sqrt(1.25)) == Approx(1.0));
  CHECK(!g.is_spike(2.5 + 2.0 * std::sqrt(1.25) - 1e-9));
  CHECK(g.is_spike(2.5 + 2.0 * std::sqrt(1.25) + 1e-9));
  CHECK(!g.is_spike(-50.0));  // only upward spikes
  CHECK(g.is_spike(NAN));
  CHECK(g.is_spike(INFINITY));
  g.accept(5.0);  // the oldest (1) leaves: 2 3 4 5
  CHECK(g.size() == 4);
  CHECK(g.zscore(3.5) == 0.0);
  rz::SpikeGuard flat(2, 1.0);
  flat.accept(1.0);
  flat.accept(1.0);
  CHECK(!flat.is_spike(1.0));
  CHECK(flat.is_spike(1.0 + 1e-12));
  CHECK_THROWS_WITH(rz::SpikeGuard(1, 2.0), Catch::Contains("spike_window: expected at least 2"));
  CHECK_THROWS_WITH(rz::SpikeGuard(10, 0.0), Catch::Contains("spike_zscore: expected a number > 0"));
  CHECK_THROWS_WITH(rz::parse_spike_metric("norm"), Catch::Contains("expected loss or grad_norm"));
}

TEST_CASE("spike guard on 2 ranks: skips counted in the progress line and metrics, the same steps every time") {
  std::vector<std::set<int>> skipped;
  for (int run = 0; run < 2; ++run) {
    const fs::path m = work_dir() / ("spike" + std::to_string(run) + ".jsonl");
    auto r = run_ringzero(tiny("--nproc-per-node 2 --strategy zero2 --steps 80 --spike-zscore 0.5 --spike-window 8 "
                               "--max-consecutive-skips 80 --metrics " + quote(m.string())),
                          300);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("SKIPPED (spike, z ") != std::string::npos);
    std::set<int> s;
    int total = 0;
    for (const auto& j : read_metrics(m)) {
      if (j.contains("spike_skipped")) {
        s.insert(j["step"].get<int>());
        CHECK(j["spike_zscore"].get<double>() > 0.5);
      }
      if (j.contains("skips_total")) total = j["skips_total"].get<int>();
    }
    REQUIRE(!s.empty());
    CHECK(total == static_cast<int>(s.size()));
    CHECK(*s.begin() > 8);  // not before the window is full
    skipped.push_back(s);
  }
  CHECK(skipped[0] == skipped[1]);
  // Off by default.
  auto r = run_ringzero(tiny("--steps 8"), 120);
  CHECK(r.status == 0);
  CHECK(r.output.find("SKIPPED") == std::string::npos);
}

TEST_CASE("spike guard: a run that keeps skipping ends at max_consecutive_skips with a clear error") {
  // A window of 2 and a threshold near 0 skip every step above the mean of the last two
  // accepted ones: about half of them, more as the accepted window drifts low.
  auto r = run_ringzero(tiny("--nproc-per-node 2 --strategy ddp --steps 300 --lr 1e-5 --spike-zscore 1e-6 "
                             "--spike-window 2 --spike-metric grad_norm --max-consecutive-skips 3"),
                        300);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("3 steps in a row were skipped (the last one a grad_norm spike, z ") != std::string::npos);
  CHECK(r.output.find("max_consecutive_skips 3): the model is not recovering, stopping") != std::string::npos);
}

TEST_CASE("--grad-reduce-dtype: values, the memory report's line, and `ringzero memory`'s fp32 reduce buffers; --flight-entries bounded") {
  auto fe = run_ringzero(tiny("--steps 2 --flight-entries 99999999"));
  CHECK(fe.status != 0);
  CHECK(fe.output.find("flight_entries: expected at most 16777216 collectives, found 99999999") != std::string::npos);
  auto bad = run_ringzero(tiny("--steps 2 --grad-reduce-dtype fp16"));
  CHECK(bad.status != 0);
  CHECK(bad.output.find("--grad-reduce-dtype: expected auto, bf16 or fp32, found 'fp16'") != std::string::npos);
  auto fp32_run = run_ringzero(tiny("--steps 2 --grad-reduce-dtype bf16"));
  CHECK(fp32_run.status != 0);
  CHECK(fp32_run.output.find("grad_reduce_dtype: bf16 needs precision bf16") != std::string::npos);
  auto r = run_ringzero(tiny("--steps 2 --nproc-per-node 2 --precision bf16 --strategy zero1 --grad-reduce-dtype fp32"), 120);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("fp32 gradient reduction (comm): 2 reduce buffers of the largest bucket") != std::string::npos);
  auto plain = run_ringzero(tiny("--steps 2 --precision bf16"), 120);
  CHECK(plain.output.find("gradient reduction in bf16") != std::string::npos);
  // Where bf16 matmuls widen to fp32 here, the first one says so, once; a query does not
  // (the JSON below is parsed from stdout and stderr together).
  const std::string mm = rz::onednn_bf16_matmul_status();
  const bool widens = mm.rfind("off: ", 0) == 0 && mm.find("RINGZERO_BF16_MATMUL") == std::string::npos;
  size_t notices = 0;
  for (size_t at = plain.output.find("bf16 matmuls run in fp32"); at != std::string::npos;
       at = plain.output.find("bf16 matmuls run in fp32", at + 1))
    ++notices;
  CHECK(notices == (widens ? 1u : 0u));
  // `ringzero memory`: the buffers are their own row, and in the JSON's comm bytes.
  auto m = run_ringzero("memory --model tiny --precision bf16 --bucket-mb 0.05 --nranks 2 --grad-reduce-dtype fp32");
  INFO(m.output);
  CHECK(m.output.find("+ fp32 reduce buffers") != std::string::npos);
  CHECK(m.output.find("gradients reduced in fp32") != std::string::npos);
  auto j0 = nlohmann::json::parse(run_ringzero("memory --model tiny --precision bf16 --nranks 2 --json").output);
  auto j1 = nlohmann::json::parse(
      run_ringzero("memory --model tiny --precision bf16 --nranks 2 --json --grad-reduce-dtype fp32").output);
  CHECK(j0["grad_reduce_dtype"] == "bf16");
  CHECK(j1["grad_reduce_dtype"] == "fp32");
  for (size_t i = 0; i < j1["rows"].size(); ++i) {
    const double wide = j1["rows"][i]["fp32_reduce_bytes"].get<double>();
    CHECK(wide > 0);
    CHECK(j1["rows"][i]["bytes_by_tag"]["comm"].get<double>() >= j0["rows"][i]["bytes_by_tag"]["comm"].get<double>() + wide);
  }
  auto badm = run_ringzero("memory --model tiny --precision fp32 --grad-reduce-dtype bf16");
  CHECK(badm.status != 0);
  CHECK(badm.output.find("--grad-reduce-dtype: bf16 needs --precision bf16") != std::string::npos);
}

TEST_CASE("comm-bench --check-precision: one rounding at N = 2, bf16 error growing with N, fp32 near exact") {
  const fs::path cfg = work_dir() / "prec.toml";
  std::ofstream(cfg) << "model = \"tiny\"\ndata = \"" << (data_dir() / "train_*.bin").string()
                     << "\"\nbatch = 4\nseq = 32\nseed = 7\n";
  auto r = run_ringzero("comm-bench --check-precision --config " + quote(cfg.string()) +
                            " --ranks 2 --ranks 4 --ranks 8 --json",
                        300);
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::vector<nlohmann::json> rows;
  std::stringstream ss(r.output);
  for (std::string line; std::getline(ss, line);)
    if (line.rfind("{", 0) == 0) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 3);
  auto at = [&](int i, const char* k) { return rows[i][k].get<double>(); };
  CHECK(rows[0]["nranks"] == 2);
  CHECK(at(0, "rs_bf16") == at(0, "fp32_to_bf16"));  // N = 2: one hop, one rounding either way
  for (int i = 0; i < 3; ++i) {
    CHECK(at(i, "rs_bf16") == at(i, "ar_bf16"));  // AllReduce = ReduceScatter + an AllGather that only copies
    CHECK(at(i, "rs_bf16") > 1e-4);
    CHECK(at(i, "rs_fp32") < 1e-6);
    CHECK(at(i, "fp32_to_bf16") < 1.2 * at(0, "fp32_to_bf16"));
  }
  CHECK(at(1, "rs_bf16") > at(0, "rs_bf16"));
  CHECK(at(2, "rs_bf16") > at(1, "rs_bf16"));
  CHECK(at(2, "rs_bf16") > 1.3 * at(2, "fp32_to_bf16"));
}
