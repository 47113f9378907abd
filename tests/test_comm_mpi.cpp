// `--comm mpi` under mpirun: the collectives (test_comm_mpi_ranks on 2 and 3 ranks), a
// timeout that names the rank, comm-bench's columns, and ddp / zero1 / zero2 training whose
// losses match the ring's to fp32 rounding. Built only with RINGZERO_MPI.
//
// mpirun runs as root in CI containers, on 2 cores: hence --allow-run-as-root and
// --oversubscribe; CMA single-copy is off because containers usually forbid ptrace.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int status = -1;
  std::string output;
};

std::string quote(const std::string& s) { return "'" + s + "'"; }

Result shell(const std::string& cmd, int timeout_s = 180) {
  const std::string full = "timeout -k 5 " + std::to_string(timeout_s) + " " + cmd + " 2>&1";
  Result r;
  FILE* p = popen(full.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string mpirun(int np) {
  return quote(RINGZERO_MPIRUN) + " --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(np) +
         " --mca btl self,vader --mca btl_vader_single_copy_mechanism none ";
}

std::string binary() { return quote(RINGZERO_BINARY); }

fs::path work_dir() {
  static fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("rz_test_comm_mpi_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

}  // namespace

TEST_CASE("every collective over MPI, blocking and async, on 2 and 3 ranks") {
  for (int np : {2, 3}) {
    Result r = shell(mpirun(np) + quote(RINGZERO_MPI_RANKS));
    INFO("np " << np << "\n" << r.output);
    CHECK(r.status == 0);
    for (int q = 0; q < np; ++q) {
      char line[64];
      std::snprintf(line, sizeof line, "rank %d of %d: ok", q, np);
      CHECK(r.output.find(line) != std::string::npos);
    }
  }
}

TEST_CASE("a rank that waits past the timeout fails naming itself and the collective, and writes its record") {
  const fs::path dir = work_dir() / "flight_timeout";
  Result r = shell(mpirun(2) + quote(RINGZERO_MPI_RANKS) + " timeout " + quote(dir.string()), 60);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("caught: rank 0: all_reduce #2 (mpi): timed out after 3 s") != std::string::npos);
  CHECK(r.output.find("(flight record: " + (dir / "rank0.json").string() + ")") != std::string::npos);
  std::ifstream in(dir / "rank0.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["backend"] == "mpi");
  CHECK(j["reason"] == "timeout");
  CHECK(j["entries"].size() == 2);
  CHECK(j["entries"][1]["state"] == "failed");
}

TEST_CASE("--comm-debug over MPI: another count is caught before it runs, both sides named, and doctor reads it") {
  const fs::path dir = work_dir() / "flight_mismatch";
  Result r = shell(mpirun(2) + quote(RINGZERO_MPI_RANKS) + " mismatch " + quote(dir.string()), 60);
  INFO(r.output);
  CHECK(r.output.find("caught: rank 0: all_reduce #2 (mpi): collective mismatch (RINGZERO_COMM_DEBUG): this rank runs "
                      "#2 all_reduce(fp32, count 100, sum) but rank 1 runs #2 all_reduce(fp32, count 50, sum)") !=
        std::string::npos);
  CHECK(r.output.find("caught: rank 1: all_reduce #2 (mpi): collective mismatch (RINGZERO_COMM_DEBUG): this rank runs "
                      "#2 all_reduce(fp32, count 50, sum) but rank 0 runs #2 all_reduce(fp32, count 100, sum)") !=
        std::string::npos);
  Result d = shell(binary() + " doctor " + quote(dir.string()), 30);
  INFO(d.output);
  CHECK(d.status == 0);
  CHECK(d.output.find("2 flight record(s)") != std::string::npos);
  CHECK(d.output.find("caught a collective mismatch at #2 (--comm-debug)") != std::string::npos);
  CHECK(d.output.find("all_reduce(fp32, count 100, sum)") != std::string::npos);
  CHECK(d.output.find("all_reduce(fp32, count 50, sum)") != std::string::npos);
}

TEST_CASE("comm-bench --comm mpi prints the ring's columns and checks every size") {
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    Result r = shell(mpirun(2) + binary() + " comm-bench --comm mpi --op " + op +
                     " --min-bytes 8 --max-bytes 256K --iters 3 --warmup 1");
    INFO(op << "\n" << r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("transport mpi") != std::string::npos);
    CHECK(r.output.find("#wrong") != std::string::npos);
    CHECK(r.output.find("       262144        65536  float    sum") != std::string::npos);
  }
  Result bad = shell(binary() + " comm-bench --comm mpi --transport thread --nproc 2");
  CHECK(bad.status != 0);
  CHECK(bad.output.find("--comm mpi runs ranks as processes under mpirun") != std::string::npos);
}

TEST_CASE("mpirun -np 2 ringzero train --comm mpi matches the ring's losses for ddp, zero1 and zero2, fp32 and bf16") {
  // A small byte-level corpus, prepared by ringzero itself.
  const fs::path text = work_dir() / "text";
  fs::create_directories(text);
  uint64_t x = 99;
  const char* words[] = {"ring ", "shard ", "bucket ", "rank ", "reduce ", "gather ", "step ", "loss "};
  for (int f = 0; f < 12; ++f) {
    char name[32];
    std::snprintf(name, sizeof name, "d%d.txt", f);
    std::ofstream out(text / name);
    for (int w = 0; w < 400; ++w) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      out << words[(x >> 33) % 8] << ((w % 9 == 8) ? ".\n" : "");
    }
  }
  const fs::path data = work_dir() / "data";
  Result prep = shell(binary() + " prepare --input " + quote(text.string()) + " --tokenizer byte --val-fraction 0.1 --out " +
                      quote(data.string()));
  INFO(prep.output);
  REQUIRE(prep.status == 0);
  const std::string common = " train --model tiny --data " + quote((data / "train_*.bin").string()) +
                             " --batch 2 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05 --threads 1 --steps 6 ";
  auto losses = [](const fs::path& p) {
    std::vector<double> out;
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    return out;
  };
  // The last two: bf16 runs whose buckets are reduced in fp32 (--grad-reduce-dtype fp32,
  // zero/wide_reduce.h), so the widened collective runs through MPI too.
  const std::string wide = " --precision bf16 --grad-reduce-dtype fp32 ";
  for (const std::string& strategy : std::vector<std::string>{"ddp", "zero1", "zero2", "ddp" + wide, "zero2" + wide}) {
    const std::string tag = strategy.substr(0, strategy.find(' ')) + (strategy.size() > 5 ? "_wide" : "");
    const fs::path ring_m = work_dir() / ("ring_" + tag + ".jsonl");
    const fs::path mpi_m = work_dir() / ("mpi_" + tag + ".jsonl");
    Result ring = shell(binary() + common + "--strategy " + strategy + " --nproc-per-node 2 --metrics " +
                        quote(ring_m.string()));
    INFO(strategy << " ring:\n" << ring.output);
    REQUIRE(ring.status == 0);
    Result mpi = shell(mpirun(2) + binary() + common + "--strategy " + strategy + " --comm mpi --metrics " +
                       quote(mpi_m.string()));
    INFO(strategy << " mpi:\n" << mpi.output);
    REQUIRE(mpi.status == 0);
    CHECK(mpi.output.find("mpi") != std::string::npos);
    const auto a = losses(ring_m), b = losses(mpi_m);
    REQUIRE(a.size() == 6);
    REQUIRE(b.size() == 6);
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("step " << i + 1 << ": ring " << a[i] << " mpi " << b[i]);
      CHECK(std::fabs(a[i] - b[i]) <= 1e-5 * std::fabs(a[i]));
    }
  }
  // --trace over MPI: each rank's collectives on its comm track, the gradient buckets named.
  const fs::path trace = work_dir() / "mpi_trace.json";
  Result traced = shell(mpirun(2) + binary() + common + "--strategy zero2 --comm mpi --trace " + quote(trace.string()) +
                        " --trace-steps 2:3");
  INFO(traced.output);
  REQUIRE(traced.status == 0);
  std::ifstream tin(trace);
  const auto tj = nlohmann::json::parse(tin);
  std::map<int, int> comm_spans;
  bool bucket_named = false;
  for (const auto& e : tj["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != 2) continue;
    comm_spans[e["pid"].get<int>()] += 1;
    if (e.contains("args") && e["args"].contains("bucket")) bucket_named = true;
  }
  CHECK(comm_spans[0] >= 4);  // two steps: reduce-scatters, all-gathers, the loss
  CHECK(comm_spans[1] == comm_spans[0]);
  CHECK(bucket_named);
  // --comm mpi needs mpirun's ranks: ringzero's own launcher cannot start them.
  Result own = shell(binary() + common + "--strategy ddp --comm mpi --nproc-per-node 2", 120);
  CHECK(own.status != 0);
  CHECK(own.output.find("start the ranks with mpirun") != std::string::npos);
  Result bad = shell(binary() + common + "--comm gloo");
  CHECK(bad.status != 0);
  CHECK(bad.output.find("comm: expected ring, mpi or nccl, found 'gloo'") != std::string::npos);
}
