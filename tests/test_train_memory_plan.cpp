// The memory planner (zero/memory/plan.h) against the tracker's measured peak per rank of
// a real training step: `ringzero train --memory-report` on small shapes, strategies,
// precisions and recompute modes, each within 10% of plan_memory().peak(). Also
// `ringzero memory`'s planner flags (--recompute, --budget) and their one-line errors, and
// the byte-size grammar memory and comm-bench share (cli/cli_number.h), and memory's
// default precision (train's).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/check.h"
#include "model/config.h"
#include "run_ringzero.h"
#include "cli/cli_number.h"
#include "train/config.h"
#include "zero/memory/plan.h"

using namespace rz;
namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::quote;
using rz::test::run_ringzero;

namespace {


fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_memory_plan_");
  return dir;
}

// Byte-level shards from generated text (vocab 257: 256 bytes and the end-of-text token).
fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    std::ofstream out(text / "doc.txt");
    for (int i = 0; i < 3000; ++i) out << "rank " << i % 7 << " reduces bucket " << (i * 13) % 11 << ".\n";
    out.close();
    const fs::path shards = work_dir() / "data";
    auto r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --val-fraction 0.1 --out " +
                          quote(shards.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return shards;
  }();
  return dir;
}

struct Case {
  const char* model;
  int max_seq, batch, seq, nranks;
  const char* strategy;
  const char* precision;
  const char* recompute;
  const char* attention = "materialized";
  const char* classifier = "auto";
};

}  // namespace

TEST_CASE("the planner's peak is within 10% of the measured peak of a real step, per rank") {
  const Case cases[] = {
      {"tiny", 64, 4, 32, 2, "ddp", "fp32", "none"},   {"tiny", 64, 4, 32, 2, "zero2", "fp32", "layer"},
      {"tiny", 64, 4, 64, 2, "zero1", "bf16", "gelu"},  {"tiny", 64, 8, 32, 1, "ddp", "bf16", "layer"},
      {"d2", 64, 8, 64, 2, "zero2", "bf16", "layer"},   {"d2", 64, 8, 64, 2, "ddp", "fp32", "none"},
      {"tiny", 64, 4, 64, 2, "zero2", "fp32", "none", "flash"}, {"d2", 64, 8, 64, 1, "ddp", "bf16", "layer", "flash"},
      {"tiny", 64, 4, 32, 2, "zero3", "bf16", "none"},  {"d2", 64, 8, 64, 2, "zero3", "fp32", "layer", "flash"},
      // The llama family: its parameter and activation counts (RMSNorm keeps no mean, the
      // SwiGLU MLP's widths, GQA's narrower qkv, no wpe; an untied lm_head).
      {"llama-tiny", 64, 4, 32, 2, "zero2", "fp32", "none"},
      {"llama-tiny", 64, 4, 64, 2, "ddp", "bf16", "gelu", "materialized", "untied"},
      {"llama-tiny", 64, 4, 32, 2, "zero3", "bf16", "layer", "flash", "untied"},
      {"llama-d4", 64, 2, 64, 2, "zero1", "fp32", "none", "flash"},
  };
  for (const Case& c : cases) {
    const std::string what = strfmt("%s B=%d T=%d N=%d %s %s recompute %s attention %s", c.model, c.batch, c.seq,
                                    c.nranks, c.strategy, c.precision, c.recompute, c.attention);
    INFO(what);
    const fs::path report = work_dir() / "report.json";
    fs::remove(report);
    auto r = run_ringzero(strfmt("train --model %s --max-seq %d --vocab 257 --batch %d --seq %d --nproc-per-node %d "
                                 "--strategy %s --precision %s --recompute %s --attention %s --classifier %s "
                                 "--threads 1 --steps 1 --bucket-mb 0.25 --data %s --memory-report %s",
                                 c.model, c.max_seq, c.batch, c.seq, c.nranks, c.strategy, c.precision, c.recompute,
                                 c.attention, c.classifier,
                                 quote((data_dir() / "train_*.bin").string()).c_str(), quote(report.string()).c_str()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    std::ifstream in(report);
    const nlohmann::json j = nlohmann::json::parse(in);

    MemoryPlanInput p;
    p.cfg = model_preset(c.model);
    p.cfg.max_seq_len = c.max_seq;
    p.cfg.vocab_size = 257;
    if (std::string(c.classifier) != "auto") p.cfg.tied = std::string(c.classifier) == "tied";
    finalize_config(p.cfg);
    p.precision = parse_precision(c.precision);
    p.recompute = parse_recompute(c.recompute);
    p.attention = parse_attention(c.attention);
    p.kind = parse_strategy(c.strategy);
    p.nranks = c.nranks;
    p.batch = c.batch;
    p.seq = c.seq;
    p.bucket_mb = 0.25;
    const MemoryPlan plan = plan_memory(p);
    CHECK(j["expected_bytes"]["activations"].get<double>() == double(plan.activations));
    REQUIRE(j["ranks"].size() == size_t(c.nranks));
    for (const auto& rank : j["ranks"]) {
      const double measured = rank["peak_total"].get<double>(), planned = double(plan.peak());
      std::printf("%-52s rank %d: measured %10.0f planned %10.0f (%+.1f%%)\n", what.c_str(),
                  rank["rank"].get<int>(), measured, planned, 100.0 * (planned - measured) / measured);
      CHECK(std::abs(planned - measured) <= 0.10 * measured);
      // The activations are exact, the tracker's peak of that tag included.
      CHECK(rank["peak"]["activations"].get<double>() == double(plan.activations));
    }
  }
}

TEST_CASE("ringzero memory plans with --recompute and answers --budget per strategy and mode") {
  auto r = run_ringzero("memory --model d12 --batch 8 --seq 1024 --nranks 8 --recompute all --precision bf16 --device cuda --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  for (const auto& row : j["rows"]) {
    const auto& by = row["by_recompute"];
    CHECK(by["none"]["activation_bytes"].get<double>() > by["gelu"]["activation_bytes"].get<double>());
    CHECK(by["gelu"]["activation_bytes"].get<double>() > 2 * by["layer"]["activation_bytes"].get<double>());
    CHECK(row["total_bytes"].get<double>() == by["none"]["total_bytes"].get<double>());
  }

  // --budget: one row per strategy and mode; more memory saved -> a larger batch, and a
  // batch that fits is the largest one (the next does not).
  r = run_ringzero("memory --model d12 --seq 1024 --nranks 8 --budget 80GB --precision bf16 --device cuda --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  j = nlohmann::json::parse(r.output);
  REQUIRE(j["rows"].size() == std::size(kStrategyKinds) * std::size(kRecomputes));
  for (const auto& row : j["rows"]) {
    MemoryPlanInput p;
    p.cfg = model_preset("d12");
    p.cfg.max_seq_len = 1024;
    finalize_config(p.cfg);
    p.kind = parse_strategy(row["strategy"].get<std::string>());
    p.recompute = parse_recompute(row["recompute"].get<std::string>());
    p.nranks = 8;
    p.cpu = false;  // --device cuda: no CPU kernel scratch
    p.batch = row["largest_batch"].get<int>();
    INFO(row.dump());
    REQUIRE(p.batch >= 1);
    CHECK(double(plan_memory(p).peak()) <= 80e9);
    ++p.batch;
    CHECK(double(plan_memory(p).peak()) > 80e9);
  }
  MemoryPlanInput tiny;
  tiny.cfg = model_preset("tiny");
  finalize_config(tiny.cfg);
  CHECK(largest_batch(tiny, 1e3) == 0);  // nothing fits in 1 KB
  r = run_ringzero("memory --model d12 --seq 1024 --nranks 8 --budget 80GB --precision bf16");
  REQUIRE(r.status == 0);
  CHECK(r.output.find("layer") != std::string::npos);

  // Bad values: one line naming the flag, non-zero exit.
  for (const char* bad : {"--budget 80XB", "--budget -5GB", "--budget nan", "--batch -3", "--recompute block"}) {
    r = run_ringzero(std::string("memory --model tiny ") + bad);
    INFO(bad << ": " << r.output);
    CHECK(r.status != 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  CHECK(run_ringzero("memory --model tiny --budget 80XB").output.find("--budget: expected a size such as 80GB") !=
        std::string::npos);
  CHECK(parse_byte_size("80GB", "x") == 80e9);
  CHECK(parse_byte_size("24 GiB", "x") == 24.0 * (1 << 30));
  CHECK(parse_byte_size("1.5e9", "x") == 1.5e9);
}

TEST_CASE("a byte size means the same bytes to memory --budget and comm-bench --max-bytes") {
  // K, M, G are binary like KiB, MiB, GiB; KB, MB, GB decimal; any case, spaces allowed.
  CHECK(parse_byte_size("64M", "x") == 64.0 * (1 << 20));
  CHECK(parse_byte_size("64 mib", "x") == 64.0 * (1 << 20));
  CHECK(parse_byte_size("64MB", "x") == 64e6);
  CHECK(parse_byte_size("2k", "x") == 2048);
  CHECK(parse_byte_size("2 KB", "x") == 2000);
  CHECK(parse_byte_size("1G", "x") == double(1 << 30));
  CHECK(parse_byte_size("0", "x") == 0);
  for (const char* bad : {"", "M", "-1K", "4Q", "1e400", "inf", "nan", "4 KX"})
    CHECK_THROWS_WITH(parse_byte_size(bad, "--flag"), Catch::StartsWith("--flag: expected a size such as 80GB"));
  for (const char* size : {"4K", "4KiB", "4kb", "4000", "1M", "1MB", "1 MiB"}) {
    const auto bench = run_ringzero(std::string("comm-bench --transport thread --nproc 2 --iters 1 --warmup 0 --json "
                                                "--min-bytes '") + size + "' --max-bytes '" + size + "'");
    INFO(size << ": " << bench.output);
    REQUIRE(bench.status == 0);
    const double bench_bytes = nlohmann::json::parse(bench.output)["bytes"].get<double>();
    const auto memory = run_ringzero(std::string("memory --model tiny --nranks 1 --json --budget '") + size + "'");
    INFO(memory.output);
    REQUIRE(memory.status == 0);
    CHECK(nlohmann::json::parse(memory.output)["budget_bytes"].get<double>() == bench_bytes);
    CHECK(parse_byte_size(size, "x") == bench_bytes);
  }
}

TEST_CASE("memory's default precision is train's") {
  const std::string train_default = precision_name(TrainConfig{}.precision());
  CHECK(train_default == "fp32");
  for (const char* shape : {"--model tiny", "--params 7e9"}) {
    const auto r = run_ringzero(std::string("memory --nranks 2 --json ") + shape);
    INFO(r.output);
    REQUIRE(r.status == 0);
    const nlohmann::json j = nlohmann::json::parse(r.output);
    CHECK(j["precision"].get<std::string>() == train_default);
    // fp32: the params are the master weights, 4 + 4 + 8 bytes per parameter for ddp.
    for (const auto& row : j["rows"]) {
      if (row["strategy"] == "ddp") CHECK(row["bytes_per_param_paper"].get<double>() == 16);
      if (row["strategy"] == "zero1") CHECK(row["bytes_per_param_paper"].get<double>() == 4 + 4 + 8.0 / 2);
    }
  }
  CHECK(nlohmann::json::parse(run_ringzero("memory --model tiny --nranks 2 --json --precision bf16").output)
            ["precision"].get<std::string>() == "bf16");
}
