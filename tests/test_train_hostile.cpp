// Hostile and careless use of `ringzero train` and `prepare` (issue 11), each case a real
// process: a re-run prepare never leaves a mix of shards, resume refuses another shape, a
// used or unwritable --save-dir is caught before step 1, a failed save is retried, a damaged
// newest checkpoint points at the newest intact one, SIGTERM stops at a step boundary with a
// checkpoint, and a killed launcher takes its ranks with it.
// Every command runs under `timeout`, so a hang fails the test instead of blocking CI
// (tests/hostile_util.h). Issue 26's cases are in test_train_hostile_io.cpp and
// test_train_hostile_flags.cpp.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "comm/rendezvous/agreement.h"
#include "comm/rendezvous/store.h"
#include "launch/launch.h"
#include "tests/hostile_util.h"

namespace fs = std::filesystem;
using rz::test::fresh_temp_dir;
using rz::test::quote;

using namespace rz::test::hostile;


TEST_CASE("prepare: a re-run, even one killed midway, leaves one complete set; train refuses a mix") {
  const fs::path out = work_dir() / "reprep";
  const fs::path big = write_text("bigtext", 30, 4000);
  Result r = run("prepare --input " + quote(big.string()) + " --tokenizer byte --shard-tokens 50000 --out " +
                 quote(out.string()));
  REQUIRE(r.status == 0);
  const std::string meta_before = slurp(out / "meta.json");
  // A smaller re-run, killed at once or soon after: the old set stays whole or the new one is in.
  for (int delay_ms : {0, 30, 120}) {
    const fs::path log = work_dir() / "reprep.log";
    pid_t sh = spawn("prepare --input " + quote((work_dir() / "text").string()) +
                         " --tokenizer gpt2 --shard-tokens 1000 --out " + quote(out.string()), log);
    data_dir();  // (text exists)
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    for (pid_t c : children_of(sh)) kill(c, SIGKILL);
    kill(sh, SIGKILL);
    waitpid(sh, nullptr, 0);
    Result t = run("train --model tiny --data " + quote((out / "train_*.bin").string()) +
                   " --batch 2 --seq 16 --steps 1 --threads 1");
    INFO(t.output);
    CHECK(t.status == 0);  // meta.json matches the shards: one complete set
    for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
  // A finished re-run replaces the set and leaves no staging directory behind.
  r = run("prepare --input " + quote((work_dir() / "text").string()) + " --tokenizer byte --out " + quote(out.string()));
  REQUIRE(r.status == 0);
  CHECK(slurp(out / "meta.json") != meta_before);
  for (const auto& e : fs::directory_iterator(work_dir()))
    CHECK(e.path().filename().string().rfind(".reprep.prepare.", 0) != 0);
  // A shard from another run copied in: train names the mismatch.
  fs::copy_file(data_dir() / "train_000000.bin", out / "train_000001.bin");
  Result t = run("train --model tiny --data " + quote((out / "train_*.bin").string()) + " --batch 2 --seq 16 --steps 1");
  CHECK(t.status == 1);
  CHECK(last_line(t.output).find("meta.json lists 1 train shards") != std::string::npos);
  // prepare refuses to swap a directory with files it did not write.
  std::ofstream(out / "notes.txt") << "mine";
  r = run("prepare --input " + quote((work_dir() / "text").string()) + " --out " + quote(out.string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("notes.txt, which prepare did not write") != std::string::npos);
}

TEST_CASE("resume refuses a different shape with the same parameter count") {
  const fs::path ck = work_dir() / "shape_ck";
  Result r = run(tiny_args("--steps 2 --save-dir " + quote(ck.string())));
  REQUIRE(r.status == 0);
  for (const char* flag : {"--heads 2", "--heads 8", "--vocab 300"}) {
    Result b = run(tiny_args(std::string(flag) + " --steps 3 --resume --save-dir " + quote(ck.string())));
    INFO(flag << "\n" << b.output);
    CHECK(b.status == 1);
    CHECK(last_line(b.output).find("holds a model of shape L2 C64 NH4 V257") != std::string::npos);
  }
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000002"});  // nothing lost
}

TEST_CASE("a used or unwritable --save-dir is an error before step 1; --overwrite replaces") {
  const fs::path ck = work_dir() / "used_ck";
  REQUIRE(run(tiny_args("--steps 4 --save-every 2 --save-dir " + quote(ck.string()))).status == 0);
  Result b = run(tiny_args("--steps 2 --save-dir " + quote(ck.string())));
  INFO(b.output);
  CHECK(b.status == 1);
  CHECK(b.output.find("step ") == std::string::npos);  // no training happened
  CHECK(last_line(b.output).find("--overwrite") != std::string::npos);
  CHECK(complete_steps(ck).size() == 2);  // the old run's checkpoints are untouched
  Result o = run(tiny_args("--steps 1 --overwrite --save-dir " + quote(ck.string())));
  INFO(o.output);
  CHECK(o.status == 0);
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000001"});
  // Under a regular file: cannot be created, found before any step runs.
  const fs::path file = work_dir() / "a_file";
  std::ofstream(file) << "x";
  Result u = run(tiny_args("--steps 2 --save-dir " + quote((file / "ck").string())));
  CHECK(u.status == 1);
  CHECK(u.output.find("step ") == std::string::npos);
  CHECK(last_line(u.output).find("save_dir: cannot create") != std::string::npos);
}

TEST_CASE("a save that fails mid-run is reported, training goes on, and the next save succeeds") {
  const fs::path ck = work_dir() / "fail_ck";
  Result r = run(tiny_args("--nproc-per-node 2 --steps 6 --save-every 2 --save-dir " + quote(ck.string())), 120,
                 "RINGZERO_FAULT_SAVE_STEP=2");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("checkpoint at step 2 NOT saved") != std::string::npos);
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000004", "step_00000006"});
  // A failing final save is an error: the run must not end as if the model were kept.
  const fs::path ck2 = work_dir() / "fail_ck2";
  Result f = run(tiny_args("--steps 2 --save-dir " + quote(ck2.string())), 120, "RINGZERO_FAULT_SAVE_STEP=2");
  CHECK(f.status == 1);
  CHECK(last_line(f.output).find("final checkpoint at step 2 could not be saved") != std::string::npos);
}

TEST_CASE("a damaged newest checkpoint: --resume names the newest intact one, --resume auto takes it") {
  const fs::path ck = work_dir() / "damaged_ck";
  const fs::path metrics = work_dir() / "damaged_m.jsonl";
  REQUIRE(run(tiny_args("--steps 6 --save-every 2 --save-dir " + quote(ck.string()) + " --metrics " +
                        quote(metrics.string()))).status == 0);
  {
    std::fstream f(ck / "step_00000006" / "rank_00000.state", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x55');
  }
  Result r = run(tiny_args("--steps 8 --resume --save-dir " + quote(ck.string())));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find("newest checkpoint") != std::string::npos);
  CHECK(last_line(r.output).find("step_00000004 (step 4): --resume auto takes it") != std::string::npos);
  Result a = run(tiny_args("--steps 8 --resume auto --save-dir " + quote(ck.string()) + " --metrics " +
                           quote(metrics.string())));
  INFO(a.output);
  CHECK(a.status == 0);
  CHECK(a.output.find("skipped damaged checkpoint") != std::string::npos);
  CHECK(a.output.find("resumed from") != std::string::npos);
  // The metrics file lists each step once: 5 and 6 of the first run were dropped on resume.
  CHECK(metric_steps(metrics) == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
  // Only damaged checkpoints: an error, not a silent fresh start over them.
  for (const auto& d : complete_steps(ck)) fs::resize_file(ck / d / "model.bin", 100);
  Result n = run(tiny_args("--steps 9 --resume auto --save-dir " + quote(ck.string())));
  CHECK(n.status == 1);
  CHECK(last_line(n.output).find("no older one is intact") != std::string::npos);
  // An empty save dir: auto starts fresh.
  Result e = run(tiny_args("--steps 1 --resume auto --save-dir " + quote((work_dir() / "empty_ck").string())));
  CHECK(e.status == 0);
}

TEST_CASE("SIGTERM to the launcher: every rank finishes its step, a checkpoint is saved, exit non-zero") {
  const fs::path d = work_dir() / "sigterm";
  fs::create_directories(d);
  const fs::path log = d / "log.txt", metrics = d / "m.jsonl";
  pid_t sh = spawn(tiny_args("--nproc-per-node 2 --strategy zero2 --steps 100000 --save-every 1000 --save-dir " +
                             quote((d / "ck").string()) + " --metrics " + quote(metrics.string())),
                   log);
  REQUIRE(wait_for([&] { return metric_steps(metrics).size() >= 3; }, 90));
  std::vector<pid_t> launcher = children_of(sh);
  REQUIRE(launcher.size() == 1);
  REQUIRE(kill(launcher[0], SIGTERM) == 0);
  int st = 0;
  REQUIRE(waitpid(sh, &st, 0) == sh);
  const std::string out = slurp(log);
  INFO(out);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 128 + SIGTERM);
  const std::vector<std::string> saved = complete_steps(d / "ck");
  REQUIRE(saved.size() == 1);
  const int step = std::stoi(saved[0].substr(5));
  CHECK(step == metric_steps(metrics).back());  // the last finished step is the saved one
  CHECK(out.find("run the same command with --resume") != std::string::npos);
  CHECK(out.find(saved[0]) != std::string::npos);
  Result r = run(tiny_args("--nproc-per-node 2 --strategy zero2 --resume --steps " + std::to_string(step + 2) +
                           " --save-dir " + quote((d / "ck").string())));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("resumed from") != std::string::npos);
}

TEST_CASE("a rank stopped during shm rendezvous leaves no segment, and names carry nothing of the token") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  // A port the kernel just gave out, not one made from the pid: 20000 + pid % 20000 was in
  // use once in CI (rank 0 then failed to bind its store, and no segment ever appeared).
  const int port = rz::pick_free_port();
  const fs::path log = work_dir() / "shm_rdv.log";
  const std::string env = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " RINGZERO_JOB_TOKEN=" + token + " RINGZERO_LAUNCHED=1";
  const std::string cmd = "exec env " + env + " " + quote(RINGZERO_BINARY) + " " +
                          tiny_args("--transport shm --comm-timeout 60 --steps 2") + " > " + quote(log.string()) + " 2>&1";
  pid_t rank0 = fork();
  if (rank0 == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Rank 1 is played by this test: it joins the store and agrees with rank 0's settings
  // (comm/rendezvous/agreement.h), so rank 0 goes on to create its inbox, publishes it and
  // waits for rank 1's, which never comes.
  std::unique_ptr<rz::StoreClient> rank1;
  std::thread agree([&] {
    rank1 = std::make_unique<rz::StoreClient>("127.0.0.1", port, token, 60.0);
    rank1->claim("rank/1", "this test", nullptr);
    const auto zeros = rz::decode_rank_settings(rank1->get("agree/0"));
    REQUIRE(zeros.has_value());
    rz::agree_at_rendezvous(*rank1, 1, *zeros, 60.0);
  });
  agree.join();
  const std::string prefix = "ringzero-" + std::to_string(rank0) + "-";
  auto segments = [&] {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
    return out;
  };
  REQUIRE(wait_for([&] { return !segments().empty(); }, 60));
  for (const auto& name : segments()) CHECK(name.find(token.substr(0, 4)) == std::string::npos);
  REQUIRE(kill(rank0, SIGTERM) == 0);
  int st = 0;
  REQUIRE(waitpid(rank0, &st, 0) == rank0);
  CHECK(segments().empty());
}

TEST_CASE("a small /dev/shm is an error naming its size and --transport tcp, not a SIGBUS") {
  // Segments larger than /dev/shm's free space stand in for a 64 MB container /dev/shm.
  struct statvfs v {};
  REQUIRE(statvfs("/dev/shm", &v) == 0);
  const double free_bytes = static_cast<double>(v.f_bavail) * v.f_frsize;
  // Four slots of half the free space each: twice what fits. comm-bench takes up to 64G.
  const double seg = free_bytes / 2;
  if (seg >= 60.0 * (1ull << 30)) {
    WARN("skipped: /dev/shm has more free space than comm-bench's largest segment can exceed");
    return;
  }
  Result r = run("comm-bench --nproc 2 --transport shm --segment-bytes " + std::to_string(static_cast<uint64_t>(seg)) +
                     " --min-bytes 1K --max-bytes 1K --iters 1 --warmup 0", 60);
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("/dev/shm") != std::string::npos);
  CHECK(r.output.find("--transport tcp") != std::string::npos);
  CHECK(r.output.find("signal") == std::string::npos);
}

TEST_CASE("a killed launcher takes its ranks with it") {
  const fs::path d = work_dir() / "orphans";
  fs::create_directories(d);
  const fs::path metrics = d / "m.jsonl";
  pid_t sh = spawn(tiny_args("--nproc-per-node 2 --transport shm --steps 100000 --metrics " + quote(metrics.string())),
                   d / "log.txt");
  REQUIRE(wait_for([&] { return metric_steps(metrics).size() >= 1; }, 90));
  std::vector<pid_t> launcher = children_of(sh);
  REQUIRE(launcher.size() == 1);
  std::vector<pid_t> ranks = children_of(launcher[0]);
  REQUIRE(ranks.size() == 2);
  REQUIRE(kill(launcher[0], SIGKILL) == 0);
  waitpid(sh, nullptr, 0);
  CHECK(wait_for([&] { return !alive(ranks[0]) && !alive(ranks[1]); }, 20));
}
