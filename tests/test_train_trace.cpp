// `ringzero train --trace` end to end: two ranks (processes) of a tiny model write one merged
// Chrome trace-event file; it must be valid JSON with a process row per rank, compute and
// comm tracks, per-layer forward/backward spans, the overlap counter, and every collective
// the comm counters saw exactly once (by kind, per rank). The ranks' clocks must agree: the
// spans of one collective on the two ranks overlap in time. Also bench-strategies --trace
// and the recorder's own rules (nothing recorded while closed, escaping).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/trace.h"
#include "train/timeline.h"

#include "tests/run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::quote;
using nlohmann::json;

namespace {

struct Result {
  int status = -1;
  std::string output;
};


Result run(const std::string& args, int timeout_s = 120) {
  const std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) + " " + quote(RINGZERO_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_trace_");
  return dir;
}

// A small byte-level corpus prepared by `ringzero prepare`.
fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    for (int f = 0; f < 8; ++f) {
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 40; ++s) out << "rank " << (s * 7 + f) % 5 << " sends chunk " << (s + f) % 4 << ".\n";
    }
    const fs::path out = work_dir() / "data";
    Result r = run("prepare --input " + quote(text.string()) + " --tokenizer byte --out " + quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  return json::parse(in);  // throws (fails the test) on invalid JSON
}

// Checks the trace of `nranks` ranks covering steps [first, last].
void check_trace(const json& t, int nranks, int first, int last, bool expect_buckets) {
  REQUIRE(t.contains("traceEvents"));
  REQUIRE(t["traceEvents"].is_array());
  std::map<int, std::set<std::string>> thread_names;
  std::set<int> process_rows;
  std::map<int, std::map<std::string, int>> comm_spans, compute_spans;
  std::map<int, int> overlap_samples;
  // (seq, kind) -> per rank [start, end]
  std::map<std::pair<int, std::string>, std::map<int, std::pair<double, double>>> by_seq;
  int with_bucket = 0;
  for (const json& e : t["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    REQUIRE(e.contains("name"));
    const std::string ph = e["ph"], name = e["name"];
    const int pid = e["pid"];
    REQUIRE(pid >= 0);
    REQUIRE(pid < nranks);
    if (ph == "M") {
      if (name == "process_name") process_rows.insert(pid);
      if (name == "thread_name") thread_names[pid].insert(e["args"]["name"].get<std::string>());
      continue;
    }
    REQUIRE(e["ts"].is_number());
    if (ph == "C") {
      CHECK(name == "overlap %");
      const double v = e["args"]["value"];
      CHECK(v >= 0.0);
      CHECK(v <= 100.0);
      ++overlap_samples[pid];
      continue;
    }
    REQUIRE(ph == "X");
    REQUIRE(e["dur"].is_number());
    CHECK(e["dur"].get<double>() >= 0.0);
    const int tid = e["tid"];
    if (tid == 2) {
      ++comm_spans[pid][name];
      REQUIRE(e["args"].contains("bytes_sent"));
      REQUIRE(e["args"].contains("seq"));
      if (e["args"].contains("bucket")) ++with_bucket;
      const double ts = e["ts"], dur = e["dur"];
      by_seq[{e["args"]["seq"].get<int>(), name}][pid] = {ts, ts + dur};
    } else {
      REQUIRE(tid == 1);
      ++compute_spans[pid][name];
    }
  }
  for (int r = 0; r < nranks; ++r) {
    INFO("rank " << r);
    CHECK(process_rows.count(r) == 1);
    CHECK(thread_names[r] == std::set<std::string>{"compute", "comm"});
    const int steps = last - first + 1;
    CHECK(overlap_samples[r] == steps);
    for (int s = first; s <= last; ++s) CHECK(compute_spans[r]["step " + std::to_string(s)] == 1);
    CHECK(compute_spans[r]["forward layer 0"] == steps);
    CHECK(compute_spans[r]["forward layer 1"] == steps);
    CHECK(compute_spans[r]["backward layer 0"] == steps);
    CHECK(compute_spans[r]["backward layer 1"] == steps);
    // Every collective the comm counters saw appears once on the comm track.
    const json& counters = t["otherData"]["ranks"][r]["comm_counters"];
    uint64_t total = 0;
    for (auto it = counters.begin(); it != counters.end(); ++it) {
      INFO(it.key());
      CHECK(static_cast<uint64_t>(comm_spans[r][it.key()]) == it.value()["calls"].get<uint64_t>());
      total += it.value()["calls"].get<uint64_t>();
    }
    CHECK(total > 0);
    size_t spans = 0;
    for (auto& [k, v] : comm_spans[r]) spans += static_cast<size_t>(v);
    CHECK(spans == total);
  }
  if (expect_buckets) CHECK(with_bucket > 0);
  // Clock alignment: one collective's spans on different ranks intersect (a rank cannot
  // finish before every other rank has started it), up to a small alignment error.
  size_t compared = 0;
  for (auto& [key, ranks] : by_seq) {
    if (ranks.size() < 2) continue;
    double latest_start = -1e300, earliest_end = 1e300;
    for (auto& [r, iv] : ranks) {
      latest_start = std::max(latest_start, iv.first);
      earliest_end = std::min(earliest_end, iv.second);
    }
    INFO(key.second << " #" << key.first);
    CHECK(latest_start <= earliest_end + 20000.0);  // microseconds
    ++compared;
  }
  if (nranks > 1) CHECK(compared > 0);
}

}  // namespace

TEST_CASE("train --trace writes one merged timeline with every collective once", "[trace]") {
  const fs::path d = data_dir();
  for (const std::string strategy : {"ddp", "zero2"}) {
    DYNAMIC_SECTION(strategy) {
      const fs::path out = work_dir() / ("run_" + strategy + ".json");
      Result r = run("train --model tiny --data " + quote((d / "train_*.bin").string()) +
                     " --batch 2 --seq 32 --steps 5 --bucket-mb 0.02 --threads 1 --nproc-per-node 2 --strategy " +
                     strategy + " --trace " + quote(out.string()) + " --trace-steps 2:4");
      INFO(r.output);
      REQUIRE(r.status == 0);
      CHECK(r.output.find("trace: steps 2..4 of 2 rank(s) written to") != std::string::npos);
      check_trace(read_json(out), 2, 2, 4, true);
    }
  }
}

TEST_CASE("train --trace-steps past the run is clipped; a bad window is a one-line error", "[trace]") {
  const fs::path d = data_dir();
  const std::string base = "train --model tiny --data " + quote((d / "train_*.bin").string()) +
                           " --batch 2 --seq 32 --steps 3 --threads 1 --trace ";
  const fs::path out = work_dir() / "clipped.json";
  Result ok = run(base + quote(out.string()) + " --trace-steps 3:9");
  INFO(ok.output);
  REQUIRE(ok.status == 0);
  check_trace(read_json(out), 1, 3, 3, false);
  for (const char* bad : {"4:2", "0:3", "x", "2:", "4:9"}) {
    Result r = run(base + quote((work_dir() / "bad.json").string()) + " --trace-steps " + bad);
    INFO(bad << ": " << r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("trace_steps") != std::string::npos);
  }
}

TEST_CASE("bench-strategies --trace writes one timeline per strategy", "[trace]") {
  const fs::path out = work_dir() / "bench.json";
  Result r = run("bench-strategies --model tiny --nproc 2 --strategy zero1 --batch 2 --seq 32 --steps 2 --warmup 1 "
                 "--bucket-mb 0.02 --trace " + quote(out.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_trace(read_json(work_dir() / "bench.zero1.json"), 2, 2, 3, true);
}

TEST_CASE("the recorder records nothing while closed and escapes names", "[trace]") {
  rz::trace::stop();
  rz::trace::start();
  rz::trace::stop();
  { RZ_TRACE_SCOPE("closed"); }
  CHECK(rz::trace::count_spans(0, rz::trace::Track::compute) == 0);
  rz::trace::start();
  rz::trace::set_thread_rank(3);
  { RZ_TRACE_SCOPE("layer", 7); }
  rz::trace::span(3, rz::trace::Track::comm, "a \"quoted\"\\name", 1.0, 2.0, "\"bytes_sent\":4");
  rz::trace::stop();
  CHECK(rz::trace::count_spans(3, rz::trace::Track::compute) == 1);
  CHECK(rz::trace::count_spans(3, rz::trace::Track::comm) == 1);
  std::string text = "[";
  text += rz::trace::rank_events_json(3);
  text += ']';
  const json events = json::parse(text);
  REQUIRE(events.size() == 2);
  CHECK(events[0]["name"] == "layer 7");
  CHECK(events[1]["name"] == "a \"quoted\"\\name");
  CHECK(events[1]["args"]["bytes_sent"] == 4);
  CHECK(rz::trace::rank_events_json(0).empty());
}

TEST_CASE("trace steps parse as A:B", "[trace]") {
  CHECK(rz::parse_trace_steps("5:8").first == 5);
  CHECK(rz::parse_trace_steps("5:8").last == 8);
  CHECK(rz::parse_trace_steps("3").last == 3);
  CHECK_THROWS_WITH(rz::parse_trace_steps("8:5"), Catch::Contains("trace_steps"));
  CHECK_THROWS_WITH(rz::parse_trace_steps(""), Catch::Contains("trace_steps"));
}
