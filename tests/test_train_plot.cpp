// `ringzero plot` end to end: loss curves from --metrics files, memory by tag from
// `ringzero memory --json` beside a measured --memory-report, comm-bench busbw from --json
// and table outputs; PNG and SVG; the one-line errors (no gnuplot, bad --out, bad lines,
// a wrong field named with its file); and no injection into gnuplot through any flag,
// file name or field (a marker file that must never appear).
// Without gnuplot on PATH the whole test reports itself skipped (exit 77, SKIP_RETURN_CODE).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
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
  // --smooth 4: step 20's training loss is the mean of steps 17..20, 5 - 1.85.
  Result m = run("plot loss" + files + " --smooth 4 --out " + quote(png.string()));
  INFO(m.output);
  REQUIRE(m.status == 0);
  const std::string smoothed = read(work_dir() / "loss.png.gp");
  CHECK(smoothed.find("20 3.15") != std::string::npos);
  CHECK(smoothed.find("(mean of 4 steps)") != std::string::npos);
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
    // comm: zero2's staging pool plus the ring's ReduceScatter chunk (zero/memory/plan.h).
    CHECK(t["comm"].get<double>() == Approx(row["staging_bytes"].get<double>() + row["ring_work_bytes"].get<double>()));
  }
  write(work_dir() / "est.json", est.output);
  // A measured report in train --memory-report's form (zero/memory/report.cpp).
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

TEST_CASE("plot precision: comm-bench --check-precision --json, errors against N on log axes", "[plot]") {
  std::ofstream out(work_dir() / "prec.jsonl");
  for (int n : {2, 4, 8})
    out << json{{"check", "precision"}, {"nranks", n}, {"count", 100}, {"rs_bf16", 1e-3 * n}, {"ar_bf16", 1e-3 * n},
                {"rs_fp32", 1e-11 * n}, {"ar_fp32", 1e-11 * n}, {"fp32_to_bf16", 1e-3}}
               .dump()
        << "\n";
  out.close();
  const fs::path png = work_dir() / "prec.png";
  Result r = run("plot precision --results " + quote((work_dir() / "prec.jsonl").string()) + " --out " + quote(png.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(is_png(png));
  const std::string script = read(work_dir() / "prec.png.gp");
  CHECK(script.find("set logscale xy") != std::string::npos);
  CHECK(script.find("8 0.008 0.008 8e-11 0.001 0.004") != std::string::npos);  // sqrt(8/2) x the first bf16 point
  write(work_dir() / "notprec.jsonl", json{{"check", "other"}}.dump() + "\n");
  Result bad = run("plot precision --results " + quote((work_dir() / "notprec.jsonl").string()) + " --out " +
                   quote((work_dir() / "x.png").string()));
  CHECK(bad.status != 0);
  CHECK(bad.output.find("notprec.jsonl:1: expected a line of comm-bench --check-precision --json") != std::string::npos);
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

namespace {

// A payload that, if it ever reached gnuplot as code, would create `marker` in the
// directory plot runs in: it ends the string and the command, runs `system`, and comments
// out the rest of the line.
std::string injection(const std::string& marker, char end = '\n') {
  return std::string("x'") + end + "system \"touch " + marker + "\"" + end + "#";
}

// prefix + n, built by appending (GCC 12 warns falsely on "literal" + std::to_string(n)).
std::string numbered(const char* prefix, int n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}

// ringzero ARGS in dir, without a shell (the payloads hold quotes and newlines), bounded
// by a deadline; stdout and stderr together.
Result run_in(const fs::path& dir, const std::vector<std::string>& args) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::vector<std::string> argv_s = {RINGZERO_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    if (::chdir(dir.c_str()) != 0) _exit(126);
    ::alarm(120);  // a hang fails the test (SIGALRM) instead of blocking CI
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(fds[1]);
  Result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.output.append(buf, size_t(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string comm_line(const std::string& op, const std::string& transport) {
  return json({{"op", op}, {"transport", transport}, {"nranks", 2}, {"bytes", 1024}, {"busbw_gbps", 1.5}}).dump() +
         "\n";
}

}  // namespace

TEST_CASE("plot: nothing from a flag, a file name or a file's field runs in gnuplot", "[plot]") {
  const fs::path d = work_dir() / "inject";
  fs::create_directories(d);
  write_metrics(d / "ok.jsonl", 1.0);
  write(d / "ok_comm.jsonl", comm_line("all_reduce", "tcp"));
  Result est = run("memory --model tiny --precision fp32 --nranks 2 --json");
  REQUIRE(est.status == 0);
  int n = 0;
  // Each case: the command (with MARKER where the payload's marker goes); whether it must
  // be refused, and then what the error names.
  using Args = std::vector<std::string>;
  struct Case {
    std::string what;
    std::function<Args(const std::string& payload)> args;
    const char* names;  // what the error names
  };
  auto metrics_named = [&](const std::string& payload) {
    const std::string name = numbered("m", n) + payload + ".jsonl";
    write_metrics(d / name, 1.0);
    return Args{"plot", "loss", "--metrics", name, "--out", "o.png"};
  };
  auto comm_file = [&](const std::string& op, const std::string& transport) {
    const std::string name = numbered("c", n) + ".jsonl";
    write(d / name, comm_line(op, transport));
    return Args{"plot", "comm", "--results", name, "--out", "o.png"};
  };
  auto estimate_with_strategy = [&](const std::string& s) {
    json j = json::parse(est.output);
    j["rows"][0]["strategy"] = s;
    write(d / "e.json", j.dump());
    return Args{"plot", "memory", "--estimate", "e.json", "--out", "o.png"};
  };
  auto measured_with_strategy = [&](const std::string& s) {
    json rep = {{"strategy", s}, {"nranks", 1}, {"ranks", {{{"rank", 0}, {"peak", {{"params", 1 << 20}}}}}}};
    write(d / "m.json", rep.dump());
    return Args{"plot", "memory", "--measured", "m.json", "--out", "o.png"};
  };
  const std::vector<Case> cases = {
      {"comm: \"op\" of a result line", [&](const std::string& p) { return comm_file(p, "tcp"); }, "\"op\""},
      {"comm: \"transport\"", [&](const std::string& p) { return comm_file("all_reduce", p); }, "\"transport\""},
      {"loss: a metrics file name (the default label)", metrics_named, "the default label"},
      {"comm: a table file name (the default label)",
       [&](const std::string& p) {
         const std::string name = numbered("t", n) + p + ".txt";
         write(d / name, "1024 256 5.0 0.2 0.2 0\n");
         return Args{"plot", "comm", "--results", name, "--out", "o.png"};
       },
       "the default label"},
      {"loss --label", [&](const std::string& p) { return Args{"plot", "loss", "--metrics", "ok.jsonl", "--label", p, "--out", "o.png"}; },
       "--label"},
      {"comm --label",
       [&](const std::string& p) { return Args{"plot", "comm", "--results", "ok_comm.jsonl", "--label", p, "--out", "o.png"}; },
       "--label"},
      {"loss --title", [&](const std::string& p) { return Args{"plot", "loss", "--metrics", "ok.jsonl", "--title", p, "--out", "o.png"}; },
       "--title"},
      {"memory --title",
       [&](const std::string& p) {
         Args a = estimate_with_strategy("zero2");
         a.insert(a.end(), {"--title", p});
         return a;
       },
       "--title"},
      {"trace --title",
       [&](const std::string& p) {
         json t = {{"traceEvents",
                    {{{"ph", "X"}, {"pid", 0}, {"tid", 1}, {"name", "forward layer 0"}, {"ts", 0}, {"dur", 10}}}}};
         write(d / "tr.json", t.dump());
         return Args{"plot", "trace", "--trace", "tr.json", "--title", p, "--out", "o.png"};
       },
       "--title"},
      {"memory: \"strategy\" of an estimate", estimate_with_strategy, "\"strategy\""},
      {"memory: \"strategy\" of a measured report", measured_with_strategy, "\"strategy\""},
      {"--out", [&](const std::string& p) { return Args{"plot", "loss", "--metrics", "ok.jsonl", "--out", "o" + p + ".png"}; },
       "--out"},
  };
  for (const Case& c : cases) {
    for (char end : {'\n', '\r'}) {
      ++n;
      const std::string marker = numbered("MARK", n);
      Result r = run_in(d, c.args(injection(marker, end)));
      INFO(c.what << " (end byte " << int(end) << "): " << r.output);
      CHECK(!fs::exists(d / marker));
      CHECK(r.status != 0);
      CHECK(r.output.find(c.names) != std::string::npos);
      CHECK(r.output.find("control character") != std::string::npos);
      CHECK(r.output.find('\n') == r.output.size() - 1);  // one line
    }
  }
  // Gnuplot's own expansions stay inert inside the script's single quotes: backquotes,
  // @macros, a quote that tries to end the string; '|' before an output path would pipe
  // the picture into a shell.
  for (const std::string& label : {std::string("`touch MARK_bq`"), std::string("@x `touch MARK_at`"),
                                   std::string("it's' . system(\"touch MARK_q\") . '")}) {
    Result r = run_in(d, {"plot", "loss", "--metrics", "ok.jsonl", "--label", label, "--out", "lbl.png"});
    INFO(r.output);
    CHECK(r.status == 0);
  }
  Result pipe_out = run_in(d, {"plot", "loss", "--metrics", "ok.jsonl", "--out", "|touch MARK_pipe;.png"});
  INFO(pipe_out.output);
  CHECK(read(d / "lbl.png.gp").find("'it''s'' . system(\"touch MARK_q\") . '' loss'") != std::string::npos);
  for (const char* m : {"MARK_bq", "MARK_at", "MARK_q", "MARK_pipe", "MARK_pipe;.png"}) CHECK(!fs::exists(d / m));
  // Text that would be refused more quietly by gnuplot 6: its \U+ escapes, C1 controls, bad UTF-8.
  for (const std::string& bad : {std::string("a\\U+000Asystem"), std::string("a\xc2\x85" "b"), std::string("a\xff")}) {
    Result r = run_in(d, {"plot", "loss", "--metrics", "ok.jsonl", "--label", bad, "--out", "bad.png"});
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("--label") != std::string::npos);
  }
}

TEST_CASE("plot: a wrong field in an input file names the file and the field, not the JSON library", "[plot]") {
  const fs::path d = work_dir() / "fields";
  fs::create_directories(d);
  Result est = run("memory --model tiny --precision fp32 --nranks 2 --json");
  REQUIRE(est.status == 0);
  json e1 = json::parse(est.output), e2 = e1, e3 = e1;
  e1["rows"][0]["nranks"] = "2";
  e2["rows"][0]["bytes_by_tag"]["params"] = "lots";
  e3["rows"][0]["strategy"] = 7;
  struct Case {
    std::string file, text, cmd, field;
  };
  const std::vector<Case> cases = {
      {"l1.jsonl", "{\"step\": 1, \"loss\": \"abc\"}\n", "plot loss --metrics", "\"loss\""},
      {"l2.jsonl", "{\"step\": \"one\", \"loss\": 1}\n", "plot loss --metrics", "\"step\""},
      {"l3.jsonl", "[1, 2]\n", "plot loss --metrics", "not a JSON object"},
      {"c1.jsonl", "{\"op\": 5, \"bytes\": 1024, \"busbw_gbps\": 1}\n", "plot comm --results", "\"op\""},
      {"c2.jsonl", "{\"op\": \"x\", \"nranks\": 2.5, \"bytes\": 1024, \"busbw_gbps\": 1}\n", "plot comm --results",
       "\"nranks\""},
      {"c3.jsonl", "{\"bytes\": \"1K\", \"busbw_gbps\": 1}\n", "plot comm --results", "\"bytes\""},
      {"c4.jsonl", "{\"bytes\": 1e300, \"busbw_gbps\": 1}\n", "plot comm --results", "2^60"},
      {"c5.txt", "1024 256 5.0 0.2 nan 0\n", "plot comm --results", "busbw"},
      {"e1.json", e1.dump(), "plot memory --estimate", "\"nranks\""},
      {"e2.json", e2.dump(), "plot memory --estimate", "\"params\""},
      {"e3.json", e3.dump(), "plot memory --estimate", "\"strategy\""},
      {"m1.json", "{\"strategy\": 7, \"nranks\": 1, \"ranks\": []}", "plot memory --measured", "\"strategy\""},
      {"m2.json", "{\"strategy\": \"ddp\", \"nranks\": 1, \"ranks\": {\"a\": 1}}", "plot memory --measured", "\"ranks\""},
      {"m3.json", "{\"strategy\": \"ddp\", \"nranks\": 1, \"ranks\": [{\"rank\": \"0\", \"peak\": {}}]}",
       "plot memory --measured", "\"rank\""},
      {"t1.json", "{\"traceEvents\": [{\"ph\": \"X\", \"pid\": \"0\", \"ts\": 0, \"dur\": 1}]}", "plot trace --trace",
       "\"pid\""},
      {"t2.json", "{\"traceEvents\": [3]}", "plot trace --trace", "traceEvents[0]"},
      {"t3.json", "{\"traceEvents\": [{\"ph\": \"X\", \"pid\": 0, \"name\": [], \"ts\": 0, \"dur\": 1}]}",
       "plot trace --trace", "\"name\""},
      {"t4.json", "{\"traceEvents\": [{\"ph\": \"X\", \"pid\": 5000, \"ts\": 0, \"dur\": 1}]}", "plot trace --trace",
       "\"pid\""},
      {"t5.json", "{\"traceEvents\": [{\"ph\": \"C\", \"pid\": 0, \"ts\": 0, \"args\": {\"value\": \"x\"}}]}",
       "plot trace --trace", "\"value\""},
  };
  for (const Case& c : cases) {
    write(d / c.file, c.text);
    Result r = run(c.cmd + " " + quote((d / c.file).string()) + " --out " + quote((d / "x.png").string()));
    INFO(c.file << ": " << r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find(c.file) != std::string::npos);
    CHECK(r.output.find(c.field) != std::string::npos);
    CHECK(r.output.find("json.exception") == std::string::npos);
    CHECK(r.output.find("type_error") == std::string::npos);
  }
  // Not a regular file: refused before it is read (a FIFO would block forever).
  REQUIRE(::mkfifo((d / "fifo.jsonl").c_str(), 0600) == 0);
  Result fifo = run("plot loss --metrics " + quote((d / "fifo.jsonl").string()) + " --out " + quote((d / "x.png").string()));
  CHECK(fifo.status != 0);
  CHECK(fifo.output.find("not a regular file") != std::string::npos);
  Result dir = run("plot comm --results " + quote(d.string()) + " --out " + quote((d / "x.png").string()));
  CHECK(dir.status != 0);
  CHECK(dir.output.find("not a regular file") != std::string::npos);
}
