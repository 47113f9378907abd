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
#include <string>
#include <vector>

#include "base/trace.h"
#include "comm/factory.h"
#include "viz/timeline.h"

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

// The collectives of a step that carry host values (no gradient bucket): by kind, the
// element count of each, on one rank, in the trace's order.
std::map<std::string, std::vector<uint64_t>> host_collectives(const json& t, int rank) {
  std::map<std::string, std::vector<uint64_t>> out;
  for (const json& e : t["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == rank && e["tid"] == 2 && !e["args"].contains("bucket"))
      out[e["name"].get<std::string>()].push_back(e["args"]["count"].get<uint64_t>());
  return out;
}

TEST_CASE("a step's host values take three collectives, however many micro-steps", "[trace]") {
  // Per step: micro-step 0's loss (all_reduce of 1, before its backward, for
  // --skip-nonfinite), the other micro-steps' losses together (all_reduce of accum - 1),
  // and every rank's peak memory with its stop vote (all_gather of 2 per rank). Before,
  // each micro-step's loss and the stop vote were collectives of their own.
  const fs::path d = data_dir();
  const fs::path out = work_dir() / "host_values.json";
  // B*T*world = 2*32*2 = 128 tokens per micro-step: 384 is 3 micro-steps.
  Result r = run("train --model tiny --data " + quote((d / "train_*.bin").string()) +
                 " --batch 2 --seq 32 --total-batch-tokens 384 --steps 4 --bucket-mb 0.02 --threads 1 "
                 "--nproc-per-node 2 --strategy ddp --trace " + quote(out.string()) + " --trace-steps 2:3");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const json t = read_json(out);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto host = host_collectives(t, rank);
    CHECK(host.at("all_reduce") == std::vector<uint64_t>{1, 2, 1, 2});
    CHECK(host.at("all_gather") == std::vector<uint64_t>{4, 4});
    CHECK(host.size() == 2);
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
  Result r = run("bench-strategies --model tiny --nproc 2 --strategy zero1 --batch 2 --seq 32 --steps 2 --untimed-steps 1 "
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

namespace {

// A device clock for host tests: stamp k reads 1000 + 250 k microseconds after its origin.
struct FakeDeviceClock : rz::trace::DeviceClock {
  int origins = 0, recycles = 0;
  uint64_t next = 0;
  std::vector<uint64_t> read;
  void set_origin() override { ++origins; }
  uint64_t stamp() override { return next++; }
  std::vector<void*> streams;  // stamp_on's, in order
  uint64_t stamp_on(void* stream) override {
    streams.push_back(stream);
    return next++;
  }
  double since_origin_us(uint64_t ticket) override {
    REQUIRE(ticket < next);
    read.push_back(ticket);
    return 1000.0 + 250.0 * double(ticket);
  }
  void recycle() override {
    ++recycles;
    next = 0;
  }
};

json events_of(int rank) {
  std::string text = "[";
  text += rz::trace::rank_events_json(rank);
  text += ']';
  return json::parse(text);
}

}  // namespace

TEST_CASE("a rank with a device clock records device time, other ranks host time", "[trace]") {
  namespace trace = rz::trace;
  FakeDeviceClock clock;
  trace::stop();
  trace::set_device_clock(4, &clock);
  trace::start();
  CHECK(clock.origins == 1);
  trace::set_thread_rank(4);
  {
    RZ_TRACE_SCOPE("outer");  // tickets 0 and 3
    { RZ_TRACE_SCOPE("inner", 2); }  // tickets 1 and 2
  }
  CHECK(clock.next == 4);
  CHECK(clock.read.empty());  // recording never waits for the device
  trace::resolve();
  CHECK(clock.read.size() == 4);
  CHECK(clock.recycles == 1);
  {
    RZ_TRACE_SCOPE("across");  // ticket 0 held over a resolve: no recycle until it is in
    trace::resolve();
    CHECK(clock.recycles == 1);
  }
  trace::resolve();
  CHECK(clock.recycles == 2);
  trace::set_thread_rank(5);
  { RZ_TRACE_SCOPE("host"); }
  trace::set_thread_rank(4);
  { RZ_TRACE_SCOPE("pending"); }  // resolved when the clock is cleared
  trace::set_device_clock(4, nullptr);
  { RZ_TRACE_SCOPE("after"); }    // host time again
  trace::stop();

  const json ev = events_of(4);
  REQUIRE(ev.size() == 5);
  std::map<std::string, json> by_name;
  for (const json& e : ev) by_name[e["name"]] = e;
  const double origin = by_name["outer"]["ts"].get<double>() - 1000.0;
  CHECK(origin >= 0.0);
  CHECK(by_name["outer"]["dur"].get<double>() == Approx(750.0).margin(1e-3));
  CHECK(by_name["inner 2"]["ts"].get<double>() == Approx(origin + 1250.0).margin(1e-3));
  CHECK(by_name["inner 2"]["dur"].get<double>() == Approx(250.0).margin(1e-3));
  CHECK(by_name["across"]["dur"].get<double>() == Approx(250.0).margin(1e-3));  // tickets 0, 1
  CHECK(by_name["pending"]["dur"].get<double>() == Approx(250.0).margin(1e-3));
  CHECK(by_name["after"]["dur"].get<double>() < 1e5);  // host microseconds, not the fake's
  const json host = events_of(5);
  REQUIRE(host.size() == 1);
  CHECK(host[0]["dur"].get<double>() >= 0.0);
  CHECK(host[0]["dur"].get<double>() < 1e5);

  // A clock that dies first takes its unresolved spans with it, and is never called again.
  FakeDeviceClock gone;
  trace::set_device_clock(4, &gone);
  trace::start();
  { RZ_TRACE_SCOPE("lost"); }
  trace::forget_device_clock(&gone);
  { RZ_TRACE_SCOPE("kept"); }
  trace::stop();
  const json after = events_of(4);
  REQUIRE(after.size() == 1);
  CHECK(after[0]["name"] == "kept");
  CHECK(gone.read.empty());
}

TEST_CASE("the trace window stamps a GPU rank's steps on its device clock", "[trace]") {
  FakeDeviceClock clock;
  rz::trace::set_thread_rank(0);
  rz::CommOptions opts;
  auto comms = rz::make_thread_communicators(1, opts);
  const fs::path out = work_dir() / "device_clock.json";
  {
    rz::TraceWindow window(out.string(), rz::TraceSteps{1, 1}, 1, "fake gpu", &clock);
    window.begin_step(*comms[0], 1);  // tickets 0 (step start) and 1 (overlap counter)
    CHECK(clock.origins == 1);
    { RZ_TRACE_SCOPE("forward"); }    // tickets 2, 3
    window.end_step(*comms[0], 1, 0.5);  // ticket 4 ends the step, then the file is written
  }
  CHECK(clock.read.size() == 5);
  const json t = read_json(out);
  std::map<std::string, json> by_name;
  for (const json& e : t["traceEvents"])
    if (e["ph"] != "M") by_name[e["name"]] = e;
  REQUIRE(by_name.count("step 1") == 1);
  CHECK(by_name["step 1"]["dur"].get<double>() == Approx(1000.0).margin(1e-3));  // tickets 0 .. 4
  CHECK(by_name["forward"]["dur"].get<double>() == Approx(250.0).margin(1e-3));
  CHECK(by_name["overlap %"]["ts"].get<double>() == Approx(by_name["step 1"]["ts"].get<double>() + 250.0).margin(1e-3));
  // Written and closed: the clock is no longer registered, later spans are host time.
  rz::trace::start();
  rz::trace::set_thread_rank(0);
  { RZ_TRACE_SCOPE("host again"); }
  rz::trace::stop();
  CHECK(clock.next == 0);  // recycled, and not stamped again
}
