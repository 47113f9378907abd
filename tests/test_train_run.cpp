// End-to-end runs of `ringzero train` as separate processes on a tiny model:
// every strategy learns, resume is bitwise, a killed rank stops the job, damaged input is a
// one-line error, and a 2-rank ZeRO-2 checkpoint resumes on 1 and 3 ranks.
// Every command runs under `timeout`, so a hang fails the test instead of blocking CI.
#include <algorithm>
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/clock.h"
#include "run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::quote;

namespace {

using Result = rz::test::BinaryRun;
using rz::test::run_ringzero;


fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_run_");
  return dir;
}

// A corpus with learnable structure: sentences drawn from a small grammar by a fixed LCG,
// prepared into byte-level shards by `ringzero prepare` (train + val).
fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    const char* subj[] = {"the cat", "a dog", "my friend", "the ring", "every rank"};
    const char* verb[] = {"sees", "sends", "reduces", "gathers", "keeps"};
    const char* obj[] = {"the shard.", "a bucket.", "its gradient.", "the model.", "one chunk."};
    uint64_t x = 12345;
    auto pick = [&](int n) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int>((x >> 33) % static_cast<uint64_t>(n));
    };
    for (int f = 0; f < 40; ++f) {
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 60; ++s) out << subj[pick(5)] << " " << verb[pick(5)] << " " << obj[pick(5)] << "\n";
    }
    const fs::path out = work_dir() / "data";
    Result r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --val-fraction 0.1 --out " +
                   quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

// Flags of a tiny run: L2 C64 NH4 (the `tiny` preset), B4 T32, lr 3e-3.
std::string tiny_args(const std::string& extra) {
  const fs::path d = data_dir();
  return "train --model tiny --data " + quote((d / "train_*.bin").string()) + " --val-data " +
         quote((d / "val_*.bin").string()) + " --batch 4 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05 --threads 1 " +
         extra;
}

std::vector<nlohmann::json> read_metrics(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

double mean_loss(const std::vector<nlohmann::json>& m, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += m[i]["loss"].get<double>();
  return s / static_cast<double>(to - from);
}

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// 20 steps on 2 ranks, checkpoints at 10 and 20; shared by the resume tests.
const fs::path& reference_run() {
  static fs::path dir = [] {
    const fs::path d = work_dir() / "ref";
    Result r = run_ringzero(tiny_args("--strategy zero2 --nproc-per-node 2 --steps 20 --save-dir " + quote((d / "ck").string()) +
                             " --save-every 10 --metrics " + quote((d / "m.jsonl").string())));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return d;
  }();
  return dir;
}

}  // namespace

TEST_CASE("a 20-step run on 2 processes learns, for every strategy") {
  for (const char* strategy : {"ddp", "zero1", "zero2", "zero3"}) {
    const fs::path metrics = work_dir() / (std::string("learn_") + strategy + ".jsonl");
    Result r = run_ringzero(tiny_args(std::string("--strategy ") + strategy + " --nproc-per-node 2 --steps 20 --eval-every 10 "
                             "--metrics " + quote(metrics.string())));
    INFO(strategy << "\n" << r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("memory after step 1") != std::string::npos);
    // The printed table shows what the automatic keys resolved to, not their 0 or auto.
    for (const char* resolved : {"257 (from the data's tokenizer.bin)", "64 (the preset's)",
                                 "256 (B*T*ranks = 4*32*2, no accumulation)", "shm (auto)"})
      CHECK(r.output.find(resolved) != std::string::npos);
    const auto m = read_metrics(metrics);
    REQUIRE(m.size() == 20);
    CHECK(m[19]["step"] == 20);
    CHECK(m[9].contains("val_loss"));
    CHECK(m[0]["comm_bytes"].get<uint64_t>() > 0);
    CHECK(mean_loss(m, 17, 20) < 0.8 * mean_loss(m, 0, 3));
  }
}

TEST_CASE("resume from step 10 gives steps 11..20 bitwise equal to the uninterrupted run") {
  const fs::path ref = reference_run();
  const fs::path d = work_dir() / "resume_same";
  fs::create_directories(d / "ck");
  fs::copy(ref / "ck" / "step_00000010", d / "ck" / "step_00000010", fs::copy_options::recursive);
  Result r = run_ringzero(tiny_args("--strategy zero2 --nproc-per-node 2 --steps 20 --resume --save-dir " +
                           quote((d / "ck").string()) + " --metrics " + quote((d / "m.jsonl").string())));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto a = read_metrics(ref / "m.jsonl");
  const auto b = read_metrics(d / "m.jsonl");
  REQUIRE(a.size() == 20);
  REQUIRE(b.size() == 10);
  for (int i = 0; i < 10; ++i) {
    INFO("step " << 11 + i);
    CHECK(b[i]["step"] == 11 + i);
    CHECK(b[i]["loss"].dump() == a[10 + i]["loss"].dump());  // the shortest round-trip text: bitwise
    CHECK(b[i]["grad_norm"].dump() == a[10 + i]["grad_norm"].dump());
  }
  // The final models are the same file byte for byte.
  std::ifstream fa(ref / "ck" / "step_00000020" / "model.bin", std::ios::binary), fb(d / "ck" / "step_00000020" / "model.bin", std::ios::binary);
  std::stringstream sa, sb;
  sa << fa.rdbuf();
  sb << fb.rdbuf();
  CHECK(sa.str() == sb.str());
}

TEST_CASE("a 2-rank zero2 checkpoint resumes on 1 and on 3 ranks") {
  const fs::path ref = reference_run();
  const auto a = read_metrics(ref / "m.jsonl");
  for (int n : {1, 3}) {
    const fs::path d = work_dir() / ("reshard_" + std::to_string(n));
    fs::create_directories(d / "ck");
    fs::copy(ref / "ck" / "step_00000010", d / "ck" / "step_00000010", fs::copy_options::recursive);
    Result r = run_ringzero(tiny_args("--strategy zero2 --nproc-per-node " + std::to_string(n) + " --steps 20 --resume --save-dir " +
                             quote((d / "ck").string()) + " --metrics " + quote((d / "m.jsonl").string())));
    INFO(n << " ranks\n" << r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("re-sharded") != std::string::npos);
    const auto b = read_metrics(d / "m.jsonl");
    REQUIRE(b.size() == 10);
    // The same model continues: step 11's loss is close to the uninterrupted run's, far
    // below the loss of a fresh model.
    CHECK(std::abs(b[0]["loss"].get<double>() - a[10]["loss"].get<double>()) < 0.15 * a[10]["loss"].get<double>());
    CHECK(b[0]["loss"].get<double>() < 0.9 * a[0]["loss"].get<double>());
    CHECK(fs::exists(d / "ck" / "step_00000020" / "COMPLETE"));
  }
}

TEST_CASE("zero3 checkpoints resume bitwise on 2 ranks, re-shard to 3, and cross to and from zero2") {
  const fs::path d = work_dir() / "zero3";
  Result ref = run_ringzero(tiny_args("--strategy zero3 --nproc-per-node 2 --steps 20 --save-dir " + quote((d / "ck").string()) +
                             " --save-every 10 --metrics " + quote((d / "m.jsonl").string())));
  INFO(ref.output);
  REQUIRE(ref.status == 0);
  const auto a = read_metrics(d / "m.jsonl");
  REQUIRE(a.size() == 20);
  struct Resume {
    const char* strategy;
    int n;
    fs::path from;  // a checkpoint directory holding step_00000010
    bool bitwise;
  };
  const std::vector<Resume> cases = {Resume{"zero3", 2, d / "ck", true}, Resume{"zero3", 3, d / "ck", false},
                                     Resume{"zero2", 2, d / "ck", false}, Resume{"zero3", 3, reference_run() / "ck", false}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Resume& c = cases[i];
    const fs::path e = work_dir() / ("zero3_resume_" + std::to_string(i));
    fs::create_directories(e / "ck");
    fs::copy(c.from / "step_00000010", e / "ck" / "step_00000010", fs::copy_options::recursive);
    Result r = run_ringzero(tiny_args(std::string("--strategy ") + c.strategy + " --nproc-per-node " + std::to_string(c.n) +
                             " --steps 20 --resume --save-dir " + quote((e / "ck").string()) + " --metrics " +
                             quote((e / "m.jsonl").string())));
    INFO(c.strategy << " on " << c.n << " ranks from " << c.from << "\n" << r.output);
    REQUIRE(r.status == 0);
    const auto b = read_metrics(e / "m.jsonl");
    REQUIRE(b.size() == 10);
    const auto& base = c.from == d / "ck" ? a : read_metrics(reference_run() / "m.jsonl");
    if (c.bitwise) {
      for (int k = 0; k < 10; ++k) CHECK(b[k]["loss"].dump() == base[10 + k]["loss"].dump());
    } else {
      CHECK(std::abs(b[0]["loss"].get<double>() - base[10]["loss"].get<double>()) < 0.15 * base[10]["loss"].get<double>());
      CHECK(b[0]["loss"].get<double>() < 0.9 * base[0]["loss"].get<double>());
    }
    CHECK(fs::exists(e / "ck" / "step_00000020" / "COMPLETE"));
  }
}

TEST_CASE("killing one rank mid-run stops the job within 30 s naming the rank; the last checkpoint loads") {
  const fs::path d = work_dir() / "kill";
  fs::create_directories(d);
  const fs::path log = d / "log.txt";
  const std::string cmd = "exec timeout -k 5 120 " + quote(RINGZERO_BINARY) + " " +
                          tiny_args("--strategy zero2 --nproc-per-node 2 --steps 100000 --save-every 5 --keep 2 --save-dir " +
                                    quote((d / "ck").string())) +
                          " > " + quote(log.string()) + " 2>&1";
  pid_t sh = fork();
  REQUIRE(sh >= 0);
  if (sh == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for a complete checkpoint, then find the launcher's children (the ranks).
  const auto t0 = rz::Clock::now();
  auto elapsed = [&] { return rz::seconds_since(t0); };
  bool have_ckpt = false;
  while (!have_ckpt && elapsed() < 90) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (fs::is_directory(d / "ck"))
      for (const auto& e : fs::directory_iterator(d / "ck"))
        if (fs::exists(e.path() / "COMPLETE")) have_ckpt = true;
  }
  REQUIRE(have_ckpt);
  // sh exec'd timeout, which forked ringzero (the launcher), which forked the ranks.
  using rz::test::children_of;
  std::vector<pid_t> launcher = children_of(sh);
  REQUIRE(launcher.size() == 1);
  std::vector<pid_t> ranks;
  while (ranks.size() < 2 && elapsed() < 90) ranks = children_of(launcher[0]);
  REQUIRE(ranks.size() == 2);  // in pid order: the order they were forked in, rank order
  REQUIRE(kill(ranks[1], SIGKILL) == 0);
  const auto killed_at = rz::Clock::now();
  int st = 0;
  REQUIRE(waitpid(sh, &st, 0) == sh);
  const double stop_s = rz::seconds_since(killed_at);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  INFO(ss.str());
  CHECK(stop_s < 30);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) != 0);
  CHECK(WEXITSTATUS(st) != 124);  // not the test's timeout
  CHECK(ss.str().find("rank 1") != std::string::npos);
  // The newest complete checkpoint still loads: resume it for two more steps on one rank.
  uint64_t newest = 0;
  for (const auto& e : fs::directory_iterator(d / "ck"))
    if (fs::exists(e.path() / "COMPLETE")) newest = std::max<uint64_t>(newest, std::stoull(e.path().filename().string().substr(5)));
  Result r = run_ringzero(tiny_args("--strategy zero2 --resume --save-dir " + quote((d / "ck").string()) + " --steps " +
                           std::to_string(newest + 2)));
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("damaged checkpoints, missing data and bad values are one-line errors with a non-zero exit") {
  const fs::path ref = reference_run();
  auto damaged = [&](const std::string& name, auto damage) {
    const fs::path d = work_dir() / ("damaged_" + name);
    fs::create_directories(d / "ck");
    fs::copy(ref / "ck" / "step_00000020", d / "ck" / "step_00000020", fs::copy_options::recursive);
    damage(d / "ck" / "step_00000020");
    return run_ringzero(tiny_args("--strategy zero2 --steps 25 --resume --save-dir " + quote((d / "ck").string())));
  };
  SECTION("corrupted rank file") {
    Result r = damaged("corrupt", [](const fs::path& ck) {
      std::fstream f(ck / "rank_00001.state", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(300);
      f.put('\x7f');
    });
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(last_line(r.output).find("rank_00001.state: checksum mismatch") != std::string::npos);
  }
  SECTION("truncated model file") {
    Result r = damaged("truncated", [](const fs::path& ck) { fs::resize_file(ck / "model.bin", 1000); });
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(last_line(r.output).find("model.bin: truncated") != std::string::npos);
  }
  SECTION("missing data path") {
    Result r = run_ringzero("train --model tiny --data /nonexistent/train_*.bin --steps 2");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find('\n') == r.output.size() - 1);  // exactly one line
    CHECK(r.output.find("/nonexistent/train_*.bin") != std::string::npos);
  }
  SECTION("bad config value in a file") {
    const fs::path cfg = work_dir() / "bad.toml";
    std::ofstream(cfg) << "steps = 10\nstrategy = \"zero9\"\n";
    Result r = run_ringzero("train " + quote(cfg.string()) + " --data x.bin");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output == "ringzero train: error: " + cfg.string() + ":2: strategy: expected ddp, zero1, zero2 or zero3, found 'zero9'\n");
    std::ofstream(cfg) << "steps = 10\nbatch = -3.5\n";
    r = run_ringzero("train " + quote(cfg.string()) + " --data x.bin");
    CHECK(r.status == 1);
    CHECK(r.output == "ringzero train: error: " + cfg.string() + ":2: batch: expected an int, found a float\n");
  }
  SECTION("bad flag value, and a flag that does not exist") {
    Result r = run_ringzero("train --data x.bin --lr fast");
    CHECK(r.status == 1);
    CHECK(r.output == "ringzero train: error: --lr: expected a finite number, found 'fast'\n");
    r = run_ringzero("train --data x.bin --learning-rate 3");
    CHECK(r.status == 1);
    CHECK(r.output.find("--learning-rate") != std::string::npos);
  }
  SECTION("--device cuda without a usable GPU is one line naming the cause") {
    // Here: a build without CUDA, or no driver, or no device. On a machine with a GPU the
    // device is fine and the missing data file is the error instead.
    Result r = run_ringzero("train --data x.bin --device cuda");
    CHECK(r.status == 1);
    CHECK(r.output.rfind("ringzero train: error: ", 0) == 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK((r.output.find("cuda") != std::string::npos || r.output.find("x.bin") != std::string::npos));
    r = run_ringzero("train --data x.bin --device cuda --nproc-per-node 2");
    CHECK(r.status != 0);
    CHECK((r.output.find("one rank per job") != std::string::npos || r.output.find("cuda") != std::string::npos));
  }
  SECTION("an accumulation that does not divide") {
    Result r = run_ringzero(tiny_args("--steps 2 --total-batch-tokens 1000"));
    CHECK(r.status == 1);
    CHECK(last_line(r.output) == "ringzero train: error: total_batch_tokens: 1000 is not a multiple of B*T*world = 4*32*1 = 128");
  }
}

TEST_CASE("a non-finite loss stops the run naming the step, or is skipped with --skip-nonfinite") {
  // lr 1e30 blows the parameters up in one step, so step 2's loss is NaN.
  Result r = run_ringzero(tiny_args("--steps 4 --lr 1e30 --warmup 0"));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output) == "ringzero train: error: step 2: the loss is NaN at micro-step 0; stopping (--skip-nonfinite skips such steps)");
  const fs::path metrics = work_dir() / "nan.jsonl";
  r = run_ringzero(tiny_args("--steps 4 --lr 1e30 --warmup 0 --skip-nonfinite --metrics " + quote(metrics.string())));
  CHECK(r.status == 0);
  const auto m = read_metrics(metrics);
  REQUIRE(m.size() == 4);
  CHECK_FALSE(m[0].contains("skipped"));
  for (int i = 1; i < 4; ++i) {
    CHECK(m[i]["skipped"] == true);
    CHECK(m[i]["loss"].is_null());
  }
}

TEST_CASE("--init starts from an llm.c model file") {
  const fs::path ref = reference_run();
  const auto a = read_metrics(ref / "m.jsonl");
  const fs::path metrics = work_dir() / "init.jsonl";
  Result r = run_ringzero(tiny_args("--steps 2 --init " + quote((ref / "ck" / "step_00000020" / "model.bin").string()) +
                           " --metrics " + quote(metrics.string())));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto m = read_metrics(metrics);
  REQUIRE(m.size() == 2);
  // The trained model's loss, not a fresh model's (ln 257 = 5.55).
  CHECK(m[0]["loss"].get<double>() < 0.9 * a[0]["loss"].get<double>());
  r = run_ringzero(tiny_args("--steps 2 --layers 3 --init " + quote((ref / "ck" / "step_00000020" / "model.bin").string())));
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find("layers: 3, but the --init model") != std::string::npos);
  r = run_ringzero(tiny_args("--steps 2 --init /nonexistent/model.bin"));
  CHECK(r.status == 1);
  CHECK(last_line(r.output) == "ringzero train: error: init: /nonexistent/model.bin: no such file");
}

TEST_CASE("--recompute gelu and layer train to bitwise the same losses as keeping everything") {
  // One process in fp32, and two processes of zero2 in bf16 (the model code is shared by
  // every strategy; the sink differs).
  for (const char* setup : {"", "--strategy zero2 --nproc-per-node 2 --precision bf16 "}) {
    std::vector<std::vector<nlohmann::json>> runs;
    for (const char* mode : {"none", "gelu", "layer"}) {
      const fs::path metrics = work_dir() / (std::string("recompute_") + mode + (*setup ? "_zero2" : "") + ".jsonl");
      Result r = run_ringzero(tiny_args(std::string(setup) + "--steps 4 --recompute " + mode + " --metrics " + quote(metrics.string())));
      INFO(r.output);
      REQUIRE(r.status == 0);
      runs.push_back(read_metrics(metrics));
    }
    for (size_t m = 0; m < runs.size(); ++m) REQUIRE(runs[m].size() == 4);
    for (size_t m = 1; m < runs.size(); ++m)
      for (size_t i = 0; i < 4; ++i) {
        INFO(setup << "mode " << m << " step " << i);
        CHECK(runs[m][i]["loss"].get<double>() == runs[0][i]["loss"].get<double>());
        CHECK(runs[m][i]["grad_norm"].get<double>() == runs[0][i]["grad_norm"].get<double>());
      }
  }
}

TEST_CASE("--attention flash trains: the first loss bitwise, the rest within rounding") {
  std::vector<std::vector<nlohmann::json>> runs;
  for (const char* mode : {"materialized", "flash"}) {
    const fs::path metrics = work_dir() / (std::string("attention_") + mode + ".jsonl");
    Result r = run_ringzero(tiny_args(std::string("--steps 4 --attention ") + mode + " --metrics " + quote(metrics.string())));
    INFO(r.output);
    REQUIRE(r.status == 0);
    runs.push_back(read_metrics(metrics));
  }
  REQUIRE(runs[0].size() == 4);
  REQUIRE(runs[1].size() == 4);
  // The forward is the same products; the gradients (and so later steps) differ by rounding.
  CHECK(runs[1][0]["loss"].get<double>() == runs[0][0]["loss"].get<double>());
  for (size_t i = 1; i < 4; ++i)
    CHECK(runs[1][i]["loss"].get<double>() == Approx(runs[0][i]["loss"].get<double>()).epsilon(1e-4));
  Result bad = run_ringzero(tiny_args("--steps 1 --attention fused"));
  CHECK(bad.status != 0);
  CHECK(bad.output.find("attention: expected materialized or flash, found 'fused'") != std::string::npos);
}

// zero1 / zero2 over shm allocate the parameters in shared memory and the peers read their
// AllGather in place (--bucket-mb 1: one bucket, chunks above kDirectChunkBytes); the
// losses are bitwise those of the same run through the slots (RINGZERO_SHM_CMA=0).
TEST_CASE("zero1 and zero2 over shm gather into shared-memory parameters, bitwise as through the slots") {
  for (const char* strategy : {"zero1", "zero2"}) {
    std::vector<std::vector<nlohmann::json>> runs;
    for (const char* cma : {"1", "0"}) {
      const fs::path metrics = work_dir() / (std::string("shared_") + strategy + "_" + cma + ".jsonl");
      setenv("RINGZERO_SHM_CMA", cma, 1);
      Result r = run_ringzero(tiny_args(std::string("--strategy ") + strategy +
                                        " --nproc-per-node 2 --transport shm --steps 4 --bucket-mb 1 --metrics " +
                                        quote(metrics.string())));
      unsetenv("RINGZERO_SHM_CMA");
      INFO(strategy << ", RINGZERO_SHM_CMA=" << cma << "\n" << r.output);
      REQUIRE(r.status == 0);
      const bool shared = r.output.find("parameters in shared memory") != std::string::npos;
      // Where process_vm_readv is denied (r.output then says so) nothing is read in place.
      if (std::string(cma) == "0" || r.output.find("cannot read rank") != std::string::npos) CHECK(!shared);
      else CHECK(shared);
      runs.push_back(read_metrics(metrics));
    }
    REQUIRE(runs[0].size() == 4);
    REQUIRE(runs[1].size() == 4);
    for (size_t i = 0; i < 4; ++i) CHECK(runs[0][i]["loss"].dump() == runs[1][i]["loss"].dump());
  }
}
