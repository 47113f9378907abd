// `ringzero plot` end to end: loss curves from --metrics files, memory by tag from
// `ringzero memory --json` beside a measured --memory-report, comm-bench busbw from --json
// and table outputs; PNG and SVG; the one-line errors (no gnuplot, bad --out, bad lines).
// Without gnuplot on PATH the whole test reports itself skipped (exit 77, SKIP_RETURN_CODE).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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


Result shell(const std::string& cmd) {
  Result r;
  FILE* p = popen(("timeout -k 5 120 " + cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

Result run(const std::string& args) { return shell(quote(RINGZERO_BINARY) + " " + args); }

fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_plot_");
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

bool is_png(const fs::path& p) { return read(p).rfind("\x89PNG\r\n\x1a\n", 0) == 0; }

// Two fake runs' metrics: loss falls, val_loss every 5 steps.
void write_metrics(const fs::path& p, double scale) {
  std::ofstream out(p);
  for (int s = 1; s <= 20; ++s) {
    json j = {{"step", s}, {"loss", scale * (5.0 - 0.1 * s)}, {"tokens", 256 * s}};
    if (s % 5 == 0) j["val_loss"] = scale * (5.2 - 0.1 * s);
    out << j.dump() << "\n";
  }
}

}  // namespace

TEST_CASE("gnuplot is installed (else the test is skipped)", "[plot]") {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("skipped: gnuplot is not on PATH (Debian: apt-get install gnuplot-nox)\n");
    std::exit(77);
  }
}

TEST_CASE("plot loss: PNG and SVG for several runs, by step and by tokens", "[plot]") {
  write_metrics(work_dir() / "a.jsonl", 1.0);
  write_metrics(work_dir() / "b.jsonl", 0.9);
  const std::string files = " --metrics " + quote((work_dir() / "a.jsonl").string()) + " " +
                            quote((work_dir() / "b.jsonl").string());
  const fs::path png = work_dir() / "loss.png", svg = work_dir() / "loss.svg";
  Result r = run("plot loss" + files + " --label ddp --label zero2 --out " + quote(png.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(is_png(png));
  const std::string script = read(work_dir() / "loss.png.gp");
  CHECK(script.find("'ddp val loss'") != std::string::npos);
  CHECK(script.find("20 3") != std::string::npos);  // step 20, loss 5 - 2 = 3
  Result s = run("plot loss" + files + " --x tokens --out " + quote(svg.string()));
  INFO(s.output);
  REQUIRE(s.status == 0);
  CHECK(read(svg).find("<svg") != std::string::npos);
  CHECK(read(work_dir() / "loss.svg.gp").find("5120 3") != std::string::npos);  // 256 x 20 tokens
}

TEST_CASE("plot memory: estimates by tag beside a measured report", "[plot]") {
  Result est = run("memory --model tiny --precision fp32 --nranks 1 --nranks 2 --json");
  REQUIRE(est.status == 0);
  const json j = json::parse(est.output);
  for (const json& row : j["rows"]) {
    const json& t = row["bytes_by_tag"];
    const double states = t["params"].get<double>() + t["grads"].get<double>() + t["master"].get<double>() +
                          t["adam_m"].get<double>() + t["adam_v"].get<double>();
    CHECK(states == Approx(row["model_states_bytes"].get<double>()));
    // comm: zero2's staging pool plus the ring's ReduceScatter chunk (train/memory_plan.h).
    CHECK(t["comm"].get<double>() == Approx(row["staging_bytes"].get<double>() + row["ring_work_bytes"].get<double>()));
  }
  write(work_dir() / "est.json", est.output);
  // A measured report in train --memory-report's form (zero/memory_report.cpp).
  json rep = {{"strategy", "zero2"}, {"nranks", 2}, {"ranks", json::array()}};
  for (int r = 0; r < 2; ++r)
    rep["ranks"].push_back({{"rank", r},
                            {"peak",
                             {{"params", 1 << 20}, {"grads", 1 << 19}, {"master", 0}, {"adam_m", 1 << 19},
                              {"adam_v", 1 << 19}, {"activations", 3 << 20}, {"comm", 1 << 18}, {"workspace", 1 << 16}}}});
  write(work_dir() / "meas.json", rep.dump());
  const fs::path png = work_dir() / "memory.png";
  Result r = run("plot memory --estimate " + quote((work_dir() / "est.json").string()) + " --measured " +
                 quote((work_dir() / "meas.json").string()) + " --out " + quote(png.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(is_png(png));
  const std::string script = read(work_dir() / "memory.png.gp");
  CHECK(script.find("multiplot") != std::string::npos);
  CHECK(script.find("\"rank 1\"\t1\t0.5\t0\t0.5\t0.5\t0.25\t3\t0.0625") != std::string::npos);  // MiB per tag
  CHECK(script.find("newhistogram 'zero2'") != std::string::npos);
}

TEST_CASE("plot comm: busbw from comm-bench --json and from a table", "[plot]") {
  Result b = run("comm-bench --op all_reduce --nproc 2 --transport thread --min-bytes 1K --max-bytes 64K --iters 2 --json");
  INFO(b.output);
  REQUIRE(b.status == 0);
  write(work_dir() / "ring.jsonl", b.output);
  write(work_dir() / "mpi.txt",
        "# MPI_Allreduce (OpenMPI), 2 ranks, float sum\n#        size        count    time(us)     algbw     busbw  "
        "#wrong\n        1024          256        5.00     0.205     0.205       0\n        2048          512        "
        "6.00     0.341     0.341       0\n");
  const fs::path png = work_dir() / "busbw.png";
  Result r = run("plot comm --results " + quote((work_dir() / "ring.jsonl").string()) + " " +
                 quote((work_dir() / "mpi.txt").string()) + " --out " + quote(png.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(is_png(png));
  const std::string script = read(work_dir() / "busbw.png.gp");
  CHECK(script.find("'all_reduce thread N=2'") != std::string::npos);
  CHECK(script.find("2048 0.341") != std::string::npos);
}

TEST_CASE("plot errors are one line naming what was wrong", "[plot]") {
  write_metrics(work_dir() / "ok.jsonl", 1.0);
  const std::string ok = quote((work_dir() / "ok.jsonl").string());
  Result nognu = shell("env PATH=/nonexistent " + quote(RINGZERO_BINARY) + " plot loss --metrics " + ok + " --out " +
                       quote((work_dir() / "x.png").string()));
  CHECK(nognu.status != 0);
  CHECK(nognu.output.find("gnuplot not found on PATH") != std::string::npos);
  CHECK(nognu.output.find("gnuplot-nox") != std::string::npos);
  Result ext = run("plot loss --metrics " + ok + " --out " + quote((work_dir() / "x.jpg").string()));
  CHECK(ext.status != 0);
  CHECK(ext.output.find("--out") != std::string::npos);
  write(work_dir() / "bad.jsonl", "{\"step\": 1, \"loss\": 2}\nnot json\n");
  Result bad = run("plot loss --metrics " + quote((work_dir() / "bad.jsonl").string()) + " --out " +
                   quote((work_dir() / "y.png").string()));
  CHECK(bad.status != 0);
  CHECK(bad.output.find("bad.jsonl:2") != std::string::npos);
  Result old = run("plot loss --x tokens --metrics " + quote((work_dir() / "bad.jsonl").string()) + " --out " +
                   quote((work_dir() / "y.png").string()));
  CHECK(old.status != 0);
  CHECK(old.output.find("tokens") != std::string::npos);
  Result missing = run("plot comm --results " + quote((work_dir() / "nope.jsonl").string()) + " --out " +
                       quote((work_dir() / "z.png").string()));
  CHECK(missing.status != 0);
  CHECK(missing.output.find("nope.jsonl") != std::string::npos);
}

TEST_CASE("plot trace draws each rank's compute and comm rows", "[plot]") {
  json t = {{"traceEvents", json::array()}};
  for (int r = 0; r < 2; ++r) {
    t["traceEvents"].push_back({{"ph", "M"}, {"pid", r}, {"name", "process_name"}, {"args", {{"name", "rank"}}}});
    t["traceEvents"].push_back({{"ph", "X"}, {"pid", r}, {"tid", 1}, {"name", "forward layer 0"}, {"ts", 0}, {"dur", 2000}});
    t["traceEvents"].push_back({{"ph", "X"}, {"pid", r}, {"tid", 1}, {"name", "backward layer 0"}, {"ts", 2000}, {"dur", 3000}});
    t["traceEvents"].push_back({{"ph", "X"}, {"pid", r}, {"tid", 2}, {"name", "all_reduce"}, {"ts", 2500}, {"dur", 1000}});
    t["traceEvents"].push_back({{"ph", "C"}, {"pid", r}, {"name", "overlap %"}, {"ts", 0}, {"args", {{"value", 50.0}}}});
  }
  write(work_dir() / "trace.json", t.dump());
  const fs::path png = work_dir() / "timeline.png";
  Result r = run("plot trace --trace " + quote((work_dir() / "trace.json").string()) + " --out " + quote(png.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(is_png(png));
  const std::string script = read(work_dir() / "timeline.png.gp");
  CHECK(script.find("'rank 1 comm'") != std::string::npos);
  CHECK(script.find("overlap 50%") != std::string::npos);
  CHECK(script.find("3 0.4 0.5 0.25") != std::string::npos);  // rank 1's all_reduce: centre 3 ms, half-width 0.5 ms
  write(work_dir() / "notrace.json", "{\"rows\": []}");
  Result bad = run("plot trace --trace " + quote((work_dir() / "notrace.json").string()) + " --out " + quote(png.string()));
  CHECK(bad.status != 0);
  CHECK(bad.output.find("not a Chrome trace-event file") != std::string::npos);
}
