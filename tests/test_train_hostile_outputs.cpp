// Issue 40, section 3: one job per save-dir, and outputs never inside the inputs. Each case
// is a real process, rebuilt from what a hostile review observed:
//   - a second job on a live save-dir (with --overwrite, with a launcher, resuming) is refused
//     with one line naming the holder's pid and command, and the first job's checkpoints
//     survive; the lock goes with the job, also when it is killed with SIGKILL;
//   - an output the run's own data pattern would match (--metrics DATA/train_000001.bin,
//     spelt through a link too), or one inside a prepared data directory (--memory-report
//     DATA/val_000000.bin, --save-dir, --trace), is refused for train and for every other
//     subcommand that writes (bench-strategies --trace, plot --out, prepare --out,
//     comm-bench --flight-dir); bench-strategies names its timelines FILE.STRATEGY.json;
//   - a NUL (or any control character) in a TOML string is refused naming the key.
#include <catch2/catch.hpp>

#include <signal.h>

#include "tests/hostile_util.h"

namespace fs = std::filesystem;
using namespace rz::test::hostile;
using rz::test::quote;

namespace {

// The ringzero process under a spawn()ed `timeout` (spawn's sh execs timeout, which forks it).
pid_t ringzero_under(pid_t sh) {
  pid_t found = -1;
  wait_for([&] {
    const auto kids = children_of(sh);
    if (!kids.empty()) found = kids.front();
    return found > 0;
  }, 30);
  return found;
}

int wait_status(pid_t p) {
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A job that keeps saving (every 2 steps) until it is stopped; returns once a checkpoint is complete.
pid_t start_long_job(const fs::path& ck, const fs::path& log, const std::string& extra = "") {
  const pid_t sh = spawn(tiny_args("--steps 100000 --save-every 2 --save-dir " + quote(ck.string()) + " " + extra), log);
  bool ended = false;  // a job that fails at once fails the test at once
  const bool saved = wait_for([&] {
    int st = 0;
    ended = ended || waitpid(sh, &st, WNOHANG) == sh;
    return ended || !complete_steps(ck).empty();
  }, 90);
  INFO(slurp(log));
  REQUIRE(saved);
  REQUIRE(!ended);
  return sh;
}

}  // namespace

TEST_CASE("a second job on a live save-dir is refused, naming the holder; the first job's work survives") {
  const fs::path ck = work_dir() / "shared_ck", log = work_dir() / "job_a.log";
  fs::remove_all(ck);
  const pid_t a = start_long_job(ck, log, "--nproc-per-node 2");
  const std::string first = complete_steps(ck).front();
  // --overwrite would delete the first job's live checkpoints; a resume would read a moving
  // target; a launcher of its own changes nothing.
  for (const std::string extra : {"--overwrite", "--resume", "--overwrite --nproc-per-node 2"}) {
    Result b = run(tiny_args("--steps 2 --save-dir " + quote(ck.string()) + " " + extra), 120);
    INFO(extra << "\n" << b.output);
    CHECK(b.status == 1);
    const std::string line = last_line(b.output);
    CHECK(line.find("save_dir: " + ck.string() + " is in use by another job (pid ") != std::string::npos);
    CHECK(line.find("--save-every 2") != std::string::npos);  // the holder's command line
    CHECK(line.find("--nproc-per-node 2") != std::string::npos);
    CHECK(b.output.find("step 1") == std::string::npos);
    CHECK(b.output.find("[rank ") == std::string::npos);  // a launcher refuses before it starts any rank
  }
  CHECK(fs::exists(ck / first / "COMPLETE"));
  CHECK(fs::exists(ck / first / "model.bin"));
  // The first job stops as it would have, saving, with a status of its own signal.
  kill(a, SIGTERM);
  const int a_status = wait_status(a);
  INFO(slurp(log));
  CHECK(a_status == 128 + SIGTERM);
  CHECK(slurp(log).find("NOT saved") == std::string::npos);
  // Gone with the job: the next one takes the directory over.
  Result c = run(tiny_args("--steps 1 --save-dir " + quote(ck.string()) + " --overwrite"), 120);
  INFO(c.output);
  CHECK(c.status == 0);
}

TEST_CASE("the save-dir lock dies with a job killed by SIGKILL") {
  const fs::path ck = work_dir() / "killed_ck", log = work_dir() / "job_killed.log";
  fs::remove_all(ck);
  const pid_t sh = start_long_job(ck, log);
  const pid_t job = ringzero_under(sh);
  REQUIRE(job > 0);
  Result refused = run(tiny_args("--steps 1 --resume --save-dir " + quote(ck.string())), 120);
  CHECK(last_line(refused.output).find("is in use by another job (pid " + std::to_string(job) + " ") !=
        std::string::npos);
  kill(job, SIGKILL);
  wait_status(sh);
  // No stale lock: resuming the killed job's checkpoints works at once.
  Result resumed = run(tiny_args("--steps 1 --resume auto --save-dir " + quote(ck.string())), 120);
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK(resumed.output.find("in use") == std::string::npos);
}

TEST_CASE("an output the data pattern would read, or inside a prepared data directory, is refused") {
  const fs::path d = data_dir();
  const std::string val = " --val-data " + quote((d / "val_*.bin").string());
  struct Case {
    std::string flags, what, why;
  };
  // DATA is a prepared directory (prepare wrote its tokenizer.bin and meta.json); `plain` holds
  // a shard and nothing else (llm.c's scripts, copied by hand), reached through a link too.
  const fs::path plain = work_dir() / "plain", plain_link = work_dir() / "plain_link";
  fs::create_directories(plain);
  fs::copy_file(d / "train_000000.bin", plain / "train_000000.bin", fs::copy_options::overwrite_existing);
  if (!fs::exists(plain_link)) fs::create_directory_symlink(plain, plain_link);
  const std::string plain_data = "train --model tiny --vocab 257 --data " + quote((plain / "train_*.bin").string()) +
                                 " --batch 4 --seq 32 --threads 1 --steps 1 ";
  const std::vector<Case> cases = {
      {tiny_args("--steps 1 --metrics " + quote((d / "train_000001.bin").string())), "metrics", "data pattern"},
      {tiny_args("--steps 1 --memory-report " + quote((d / "val_000000.bin").string())), "memory_report",
       "prepared data directory"},
      {tiny_args("--steps 1" + val + " --memory-report " + quote((d / "val_000001.bin").string())), "memory_report",
       "val_data pattern"},
      {tiny_args("--steps 1 --metrics " + quote((d / "run.jsonl").string())), "metrics", "prepared data directory"},
      {tiny_args("--steps 1 --trace-steps 1:1 --trace " + quote((d / "t.json").string())), "trace",
       "prepared data directory"},
      {tiny_args("--steps 1 --save-dir " + quote((d / "ck").string())), "save_dir", "prepared data directory"},
      {tiny_args("--steps 1 --flight-dir " + quote((d / "flight").string())), "flight_dir", "prepared data directory"},
      {plain_data + "--metrics " + quote((plain / "train_000001.bin").string()), "metrics", "data pattern"},
      {plain_data + "--metrics " + quote((plain_link / "train_000002.bin").string()), "metrics", "data pattern"},
      {"bench-strategies --model tiny --strategy ddp --nproc 1 --steps 1 --untimed-steps 0 --trace " +
           quote((d / "train_000000.bin").string()), "--trace", "prepared data directory"},
      {"prepare --input " + quote((work_dir() / "text").string()) + " --out " + quote((d / "more").string()), "--out",
       "prepared data directory"},
      {"comm-bench --nproc 2 --transport thread --max-bytes 1K --flight-dir " + quote((d / "fl").string()),
       "--flight-dir", "prepared data directory"},
  };
  std::vector<std::string> before;
  for (const auto& e : fs::directory_iterator(d)) before.push_back(e.path().filename().string());
  for (const Case& c : cases) {
    Result r = run(c.flags);
    INFO(c.flags << "\n" << r.output);
    CHECK(r.status == 1);
    const std::string line = last_line(r.output);
    CHECK(line.find("error: " + c.what + ": ") != std::string::npos);
    CHECK(line.find(c.why) != std::string::npos);
  }
  // Nothing was written into the data, and the data still trains.
  std::vector<std::string> after;
  for (const auto& e : fs::directory_iterator(d)) after.push_back(e.path().filename().string());
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  CHECK(after == before);
  CHECK(std::vector<std::string>{"train_000000.bin"} ==
        std::vector<std::string>{fs::directory_iterator(plain)->path().filename().string()});
  Result ok = run(tiny_args("--steps 1"));
  CHECK(ok.status == 0);
  // Without prepare's meta.json, its tokenizer.bin beside a first shard still marks the data;
  // a tokenizer.bin alone (kept in a project folder for `sample`) does not.
  const fs::path bare = work_dir() / "bare_data", project = work_dir() / "project";
  fs::create_directories(bare);
  fs::create_directories(project);
  for (const char* f : {"tokenizer.bin", "train_000000.bin"})
    fs::copy_file(d / f, bare / f, fs::copy_options::overwrite_existing);
  fs::copy_file(d / "tokenizer.bin", project / "tokenizer.bin", fs::copy_options::overwrite_existing);
  Result in_bare = run(tiny_args("--steps 1 --metrics " + quote((bare / "m.jsonl").string())));
  CHECK(last_line(in_bare.output).find("prepared data directory (its tokenizer.bin says so)") != std::string::npos);
  Result in_project = run(tiny_args("--steps 1 --metrics " + quote((project / "m.jsonl").string())));
  INFO(in_project.output);
  CHECK(in_project.status == 0);
  CHECK(fs::exists(project / "m.jsonl"));
}

TEST_CASE("plot --out inside a prepared data directory is refused like train's outputs") {
  const fs::path m = work_dir() / "plot_metrics.jsonl";
  std::ofstream(m) << "{\"step\": 1, \"loss\": 2.0}\n";
  Result r = run("plot loss --metrics " + quote(m.string()) + " --out " + quote((data_dir() / "loss.png").string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find("--out: ") != std::string::npos);
  CHECK(last_line(r.output).find("prepared data directory") != std::string::npos);
  CHECK(!fs::exists(data_dir() / "loss.png.gp"));
}

TEST_CASE("bench-strategies --trace writes FILE.STRATEGY.json, whatever FILE ends with") {
  const fs::path dir = work_dir() / "bench_trace";
  fs::create_directories(dir);
  for (const std::string name : {"run.bin", "plain"}) {
    Result r = run("bench-strategies --model tiny --strategy ddp --nproc 1 --batch 1 --seq 16 --steps 1 --untimed-steps 0 "
                   "--trace " + quote((dir / name).string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(fs::exists(dir / (name + ".ddp.json")));
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"plain.ddp.json", "run.bin.ddp.json"});
}

TEST_CASE("a NUL or a control character in a setting's string is refused, naming the key") {
  const fs::path cfg = work_dir() / "nul.toml";
  const fs::path target = work_dir() / "nul_out";
  fs::remove_all(target);
  fs::create_directories(target);
  struct Case {
    std::string toml, key, says;
  };
  const std::vector<Case> cases = {
      {"metrics = \"" + (target / "m.jsonl").string() + "\\u0000/../evil.jsonl\"\n", "metrics", "NUL character"},
      {"save_dir = \"" + (target / "ck").string() + "\\u0000x\"\n", "save_dir", "NUL character"},
      {"trace = \"t\\u001b]0;owned\\u0007.json\"\n", "trace", "control character"},
      {"data = \"a\\nb\"\n", "data", "control character"},
  };
  for (const Case& c : cases) {
    std::ofstream(cfg) << "steps = 1\n" << c.toml;
    Result r = run("train " + quote(cfg.string()) + " " + tiny_args("").substr(6));
    INFO(c.toml << "\n" << r.output);
    CHECK(r.status == 1);
    const std::string line = last_line(r.output);
    CHECK(line.find(cfg.string() + ":2: " + c.key + ": holds a " + c.says) != std::string::npos);
    CHECK(line.find('\x1b') == std::string::npos);
  }
  CHECK(fs::is_empty(target));  // nothing written where the truncated path pointed
  // A quoted key with a NUL is an unknown key, shown whole.
  std::ofstream(cfg) << "\"metrics\\u0000x\" = \"m.jsonl\"\n";
  Result k = run("train " + quote(cfg.string()) + " " + tiny_args("").substr(6));
  CHECK(last_line(k.output).find("unknown key 'metrics\\x00x'") != std::string::npos);
}
