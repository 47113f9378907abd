// No crash, no hang, nothing unbounded, nothing silently wrong (issue 26), each case a real
// process: thread counts bounded; a FIFO or directory where a file is read refused before it
// is opened; products of user numbers checked; an allocation that fails names what and how
// much; options that would do nothing, non-finite numbers and out-of-range seeds refused; a
// run that skips every step stops; a signal to one rank is reported as that rank's.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "base/checked.h"
#include "launch/launch.h"
#include "tests/hostile_util.h"

namespace fs = std::filesystem;
using namespace rz::test::hostile;
using rz::test::quote;

namespace {

// One line, exit 1, no crash: what every bad input gets.
void check_one_line_error(const Result& r, const std::string& want) {
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find(want) != std::string::npos);
  CHECK(r.output.find("Segmentation") == std::string::npos);
  CHECK(r.output.find("std::bad_alloc") == std::string::npos);
  CHECK(r.output.find("Run with --help") == std::string::npos);
}

fs::path fifo_at(const std::string& name) {
  const fs::path p = work_dir() / name;
  if (!fs::exists(p)) REQUIRE(mkfifo(p.c_str(), 0644) == 0);
  return p;
}

}  // namespace

TEST_CASE("thread counts are bounded by the machine's cores with a clear error") {
  for (const char* n : {"100000", "5000", "-1"})
    check_one_line_error(run(tiny_args(std::string("--steps 1 --threads ") + n), 30), "--threads: expected 0");
  check_one_line_error(run(tiny_args("--steps 1 --threads 0"), 30, "OMP_NUM_THREADS=100000"),
                       "OMP_NUM_THREADS (or set --threads): 100000 threads");
  check_one_line_error(run("bench-step --model tiny --threads 1,100000 --steps 1 --untimed-steps 0", 30), "--threads: 100000 threads");
}

TEST_CASE("a FIFO or a directory where a file is read is refused before it is opened") {
  const fs::path fifo = fifo_at("input.fifo");
  const fs::path dir = work_dir() / "a_directory";
  fs::create_directories(dir);
  // Each would block forever on the FIFO (timeout: 124) or read the directory as empty.
  for (const fs::path& p : {fifo, dir}) {
    check_one_line_error(run("train " + quote(p.string()) + " --data x.bin", 20), "config file " + p.string() + ": is a");
    check_one_line_error(run("bench-strategies --config " + quote(p.string()), 20), "config file " + p.string());
    check_one_line_error(run("bench-step --config " + quote(p.string()), 20), "config file " + p.string());
  }
  check_one_line_error(run(tiny_args("--steps 1 --tokenizer " + quote(fifo.string())), 20), "is a FIFO");
  check_one_line_error(run(tiny_args("--steps 1 --init " + quote(fifo.string())), 20), "is a FIFO");
  check_one_line_error(run("train --model tiny --steps 1 --data " + quote(fifo.string()), 20), "token shard");
  check_one_line_error(run("sample --model " + quote(fifo.string()), 20), "not a regular file");
  check_one_line_error(run("plot loss --metrics " + quote(fifo.string()) + " --out x.png", 20), "plot input");
  check_one_line_error(run("prepare --input " + quote(fifo.string()) + " --out " + quote((work_dir() / "p").string()), 20),
                       "not a regular file");
  // A FIFO planted as a prepared directory's meta.json.
  const fs::path d = work_dir() / "fifo_meta";
  fs::create_directories(d);
  fs::copy_file(data_dir() / "train_000000.bin", d / "train_000000.bin", fs::copy_options::overwrite_existing);
  if (!fs::exists(d / "meta.json")) REQUIRE(mkfifo((d / "meta.json").c_str(), 0644) == 0);
  check_one_line_error(run("train --model tiny --steps 1 --threads 1 --data " + quote((d / "train_*.bin").string()), 20),
                       "meta.json: is a FIFO");
}

TEST_CASE("products of user numbers are checked, not wrapped") {
  // The two (with B*T = 64 the second is 2^31 micro-steps, one past an int).
  check_one_line_error(run(tiny_args("--steps 1 --batch 2 --total-batch-tokens 274877906944")),
                       "total_batch_tokens: 274877906944 / (B*T*world = 64) = 4294967296 micro-steps per step");
  check_one_line_error(run(tiny_args("--steps 1 --batch 2 --total-batch-tokens 137438953472")),
                       "= 2147483648 micro-steps per step; at most 2147483647");
  check_one_line_error(run(tiny_args("--steps 2147483647 --batch 2 --total-batch-tokens 68719476736")),
                       "total_batch_tokens x steps (tokens seen by the run): 68719476736 x 2147483647 is out of range");
  check_one_line_error(run(tiny_args("--steps 1 --bucket-mb 1e30")), "--bucket-mb: expected a bucket size in MiB > 0");
  check_one_line_error(run("memory --model d12 --batch 2147483647"), "would pass 1e18 bytes");
  check_one_line_error(run("memory --model d12 --budget 1e400GB"), "--budget: expected a size");
}

TEST_CASE("an allocation that fails names what it was for and how much") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("skipped: a sanitizer's shadow memory does not fit under ulimit -v");
#else
  // 2.27 GiB of activations under a 3 GB address-space limit (the libraries, cuBLAS and
  // cuBLASLt included, and the optimizer state fit below it).
  Result r = run(tiny_args("--steps 1 --layers 8 --channels 1024 --heads 8 --batch 64 --seq 64"), 60,
                 "ulimit -v 3000000;");
  check_one_line_error(r, "out of memory allocating");
  CHECK(last_line(r.output).find("GiB for activations") != std::string::npos);
#endif
}

TEST_CASE("options that would do nothing are refused with the reason") {
  const struct {
    std::string args, want;
  } cases[] = {
      {tiny_args("--steps 1 --eval-every 1"), "eval_every: does nothing without val_data"},
      {tiny_args("--steps 1 --trace-steps 1:2"), "trace_steps: does nothing without trace"},
      {tiny_args("--steps 1 --sample-top-k 5"), "sample_top_k: does nothing without sample_every"},
      {tiny_args("--steps 1 --keep 2"), "keep: does nothing without save_dir"},
      {tiny_args("--steps 1 --overwrite"), "overwrite: does nothing without save_dir"},
      {tiny_args("--steps 1 --max-consecutive-skips 3"), "max_consecutive_skips: does nothing without skip_nonfinite"},
      {tiny_args("--steps 1 --gpt2-dir x"), "gpt2_dir: does nothing without tokenizer = gpt2"},
      {tiny_args("--steps 1 --buckets-in-flight 3"), "buckets_in_flight: does nothing"},
      {tiny_args("--steps 1 --strategy zero2 --grad-shard-fp32"), "grad_shard_fp32: does nothing"},
      {tiny_args("--steps 1 --comm mpi --transport tcp"), "transport: does nothing"},
      {"comm-trace --example --op all_gather", "--example: cannot be combined with --op"},
      {"comm-trace --example --nranks 4", "--example: cannot be combined with --nranks"},
      {"comm-bench --comm mpi --nproc 2", "--nproc: does nothing with --comm mpi"},
      {"sample --model x --temperature 0 --top-k 5", "--top-k: does nothing with --temperature 0"},
      {"sample --model x --gpt2-dir g", "--gpt2-dir: does nothing without --tokenizer gpt2"},
      {"prepare --input x --out y --seed 3", "--seed: does nothing with --val-fraction 0"},
      {"memory --params 7e9 --batch 4", "--batch: does nothing with a bare --params count"},
      {"bench-strategies --trace-steps 1:2", "--trace-steps: does nothing without --trace"},
  };
  for (const auto& c : cases) check_one_line_error(run(c.args, 30), c.want);
  // Shards without a tokenizer.bin beside them: a sample could not be decoded.
  const fs::path bare = work_dir() / "bare_shards";
  fs::create_directories(bare);
  fs::copy_file(data_dir() / "train_000000.bin", bare / "train_000000.bin", fs::copy_options::overwrite_existing);
  check_one_line_error(run("train --model tiny --steps 1 --threads 1 --sample-every 1 --data " +
                           quote((bare / "train_*.bin").string())),
                       "sample_every: does nothing without a tokenizer");
}

TEST_CASE("non-finite numbers and out-of-range seeds are refused wherever a number is read") {
  const struct {
    std::string args, want;
  } cases[] = {
      {tiny_args("--steps 1 --lr nan"), "--lr: expected a finite number, found 'nan'"},
      {tiny_args("--steps 1 --grad-clip inf"), "--grad-clip: expected a finite number"},
      {tiny_args("--steps 1 --comm-timeout 1e999"), "--comm-timeout: expected a finite number"},
      {tiny_args("--steps 1 --seed -1"), "--seed: expected an integer in [0, 18446744073709551615], found '-1'"},
      {tiny_args("--steps 1 --seed 18446744073709551616"), "--seed: expected an integer in [0, "},
      {"prepare --input x --out y --val-fraction 0.5 --seed -1", "--seed: expected an integer in [0, "},
      {"prepare --input x --out y --val-fraction nan", "--val-fraction: expected a finite number"},
      {"sample --model x --seed -1", "--seed: expected an integer in [0, "},
      {"sample --model x --temperature nan", "--temperature: expected a finite number"},
      {"verify --model x --state y --rtol nan", "--rtol: expected a finite number"},
      {"verify --model x --state y --loss-atol inf", "--loss-atol: expected a finite number"},
      {"comm-bench --comm-timeout nan", "--comm-timeout: expected a finite number"},
      {"memory --params nan", "--params: expected a finite number, found 'nan'"},
      {"memory --params inf", "--params: expected a finite number, found 'inf'"},
      {"memory --params -1", "--params: expected a parameter count in [1, 1e15] (such as 7e9), found -1"},
      {"memory --params 0", "--params: expected a parameter count in [1, 1e15] (such as 7e9), found 0"},
      {"memory --model d12 --bucket-mb nan", "--bucket-mb: expected a finite number"},
      {"memory --model d12 --nranks 3e9", "--nranks: expected an integer"},
  };
  for (const auto& c : cases) check_one_line_error(run(c.args, 30), c.want);
  const fs::path toml = work_dir() / "nan.toml";
  std::ofstream(toml) << "lr = nan\nseed = 1\n";
  check_one_line_error(run("train " + quote(toml.string()) + " --data x.bin"), ":1: lr: expected a finite number");
}

TEST_CASE("--skip-nonfinite stops after a bounded number of steps skipped in a row") {
  // lr 1e30 blows the parameters up in one step: every later loss is NaN.
  const fs::path m = work_dir() / "skips.jsonl";
  Result r = run(tiny_args("--steps 50 --lr 1e30 --warmup 0 --skip-nonfinite --max-consecutive-skips 3 --metrics " +
                           quote(m.string())));
  check_one_line_error(r, "3 steps in a row were skipped (the last one's loss NaN; max_consecutive_skips 3)");
  CHECK(metric_steps(m) == std::vector<int>{1, 2, 3});  // step 4's third skip ends the run
  Result d = run(tiny_args("--steps 50 --lr 1e30 --warmup 0 --skip-nonfinite"));
  check_one_line_error(d, "10 steps in a row were skipped");  // the default bound
}

TEST_CASE("SIGINT to one rank is reported as that rank's, and every rank saves and stops") {
  const fs::path d = work_dir() / "sigint_rank";
  fs::create_directories(d);
  const fs::path log = d / "log.txt", metrics = d / "m.jsonl";
  pid_t sh = spawn(tiny_args("--nproc-per-node 2 --steps 100000 --save-every 100000 --save-dir " +
                             quote((d / "ck").string()) + " --metrics " + quote(metrics.string())),
                   log);
  REQUIRE(wait_for([&] { return metric_steps(metrics).size() >= 3; }, 90));
  std::vector<pid_t> launcher = children_of(sh);
  REQUIRE(launcher.size() == 1);
  pid_t rank0 = -1;
  for (pid_t p : children_of(launcher[0])) {
    std::ifstream env("/proc/" + std::to_string(p) + "/environ");
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (all.find(std::string("RANK=0\0", 7)) == 0 || all.find(std::string("\0RANK=0\0", 8)) != std::string::npos)
      rank0 = p;
  }
  REQUIRE(rank0 > 0);
  REQUIRE(kill(rank0, SIGINT) == 0);
  int st = 0;
  REQUIRE(waitpid(sh, &st, 0) == sh);
  const std::string out = slurp(log);
  INFO(out);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 128 + SIGINT);
  CHECK(out.find("ringzero: rank 0 received SIGINT; every rank finished its step and stopped") != std::string::npos);
  CHECK(out.find("killed by") == std::string::npos);
  CHECK(out.find("signal 15") == std::string::npos);
  CHECK(complete_steps(d / "ck").size() == 1);
}

TEST_CASE("an input file's bad field is named with the file") {
  const fs::path d = work_dir() / "bad_meta";
  fs::create_directories(d);
  fs::copy_file(data_dir() / "train_000000.bin", d / "train_000000.bin", fs::copy_options::overwrite_existing);
  const std::string train = "train --model tiny --steps 1 --threads 1 --data " + quote((d / "train_*.bin").string());
  const std::string meta = (d / "meta.json").string();
  std::ofstream(meta) << "{\"train_shards\": 5, \"val_shards\": []}";
  check_one_line_error(run(train), meta + ": 'train_shards' is not a list of shard file names");
  std::ofstream(meta) << "{\"train_shards\": [7], \"val_shards\": []}";
  check_one_line_error(run(train), meta + ": 'train_shards' holds 7, not a shard file name");
  std::ofstream(meta) << "{\"train_shards\": [\"train_000000.bin\"], \"train_tokens\": \"many\", \"val_shards\": []}";
  check_one_line_error(run(train), meta + ": 'train_tokens' is \"many\", not a token count");
}

TEST_CASE("precision auto resolved differently on two ranks is one error at setup, on both") {
  // Rank 1 plays a machine without bf16 units (RINGZERO_BF16_MATMUL=fp32 turns them off).
  // Where this CPU has none, both ranks resolve fp32 and agree: nothing to see.
  const bool bf16_units = std::getenv("RINGZERO_BF16_MATMUL") == nullptr &&
                          run(tiny_args("--precision auto --steps 1")).output.find("bf16 (auto: ") != std::string::npos;
  if (!bf16_units) {
    WARN("not exercised here: this CPU has no AVX512_BF16 or AMX-BF16, so auto is fp32 on every rank");
    return;
  }
  const int port = rz::pick_free_port();  // not one made from the pid, which can be in use
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                          " RINGZERO_JOB_TOKEN=0123456789abcdef0123456789abcdef RINGZERO_LAUNCHED=1";
  const fs::path log0 = work_dir() / "auto_r0.log", log1 = work_dir() / "auto_r1.log";
  const std::string rank = " timeout -k 5 120 " + quote(RINGZERO_BINARY) + " " +
                           tiny_args("--precision auto --steps 2 --comm-timeout 60");
  const std::string cmd = "env " + env + " RANK=1 LOCAL_RANK=1 RINGZERO_BF16_MATMUL=fp32" + rank + " > " +
                          quote(log1.string()) + " 2>&1 & env " + env + " RANK=0 LOCAL_RANK=0" + rank + " > " +
                          quote(log0.string()) + " 2>&1; a=$?; wait $!; b=$?; [ $a -ne 0 ] && [ $b -ne 0 ]";
  CHECK(std::system(cmd.c_str()) == 0);  // both ranks exit non-zero
  const std::string want = "precision: auto resolved to bf16 on 1 of 2 ranks";
  for (const fs::path& log : {log0, log1}) {
    INFO(log.string() << ":\n" << slurp(log));
    CHECK(slurp(log).find(want) != std::string::npos);
  }
}

// --- issue 40, section 6: bounds and signals ---------------------------------------------

namespace {

// Waits up to `seconds` for the spawned process to end; kills it (and fails) when it does not.
int wait_bounded(pid_t sh, double seconds) {
  int st = 0;
  const bool ended = wait_for([&] { return waitpid(sh, &st, WNOHANG) == sh; }, seconds);
  if (!ended) {
    kill(sh, SIGKILL);  // timeout(1): its child follows with -k
    waitpid(sh, &st, 0);
    FAIL("still running " << seconds << " s after the signal");
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The one process a spawn() started: timeout(1)'s child.
pid_t spawned_ringzero(pid_t sh) {
  std::vector<pid_t> c;
  REQUIRE(wait_for([&] { return (c = children_of(sh)).size() == 1; }, 30));
  return c[0];
}

}  // namespace

TEST_CASE("--nproc-per-node beyond 4 ranks per core is refused before anything starts") {
  const int too_many = rz::max_threads() + 1;
  for (int n : {too_many, 1000}) {
    const auto t0 = std::chrono::steady_clock::now();
    Result r = run(tiny_args("--steps 2 --nproc-per-node " + std::to_string(n)), 60);
    check_one_line_error(r, "--nproc-per-node: expected 1.." + std::to_string(rz::max_threads()) + " ranks (4 per core, " +
                                std::to_string(rz::online_cores()) + " cores on this machine), found " + std::to_string(n));
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20.0);
    CHECK(r.output.find("[rank") == std::string::npos);  // no rank was started
  }
}

TEST_CASE("a rank that cannot be started ends the launch at once: the others stopped, one line, non-zero") {
  // RINGZERO_TEST_FORK_FAILS=1: rank 1's fork fails as it does when memory or the process
  // table runs out. Rank 0, started already, must not wait for it.
  const auto t0 = std::chrono::steady_clock::now();
  Result r = run(tiny_args("--steps 2 --nproc-per-node 3 --comm-timeout 200"), 120, "RINGZERO_TEST_FORK_FAILS=1");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find("ringzero: could not start rank 1 of 3: launcher: fork() for rank 1:") !=
        std::string::npos);
  CHECK(last_line(r.output).find("stopped the 1 rank(s) already started") != std::string::npos);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30.0);
}

TEST_CASE("train caps --sample-tokens as sample does, and a long sample stops at SIGTERM and saves") {
  check_one_line_error(run(tiny_args("--steps 2 --sample-every 1 --sample-tokens 100000000")),
                       "--sample-tokens: expected 1..1048576 tokens (each is a forward pass), found 100000000");
  const fs::path d = work_dir() / "long_sample";
  fs::remove_all(d);
  fs::create_directories(d);
  const fs::path m = d / "m.jsonl";
  const pid_t sh = spawn(tiny_args("--steps 1000 --sample-every 1 --sample-tokens 1048576 --save-dir " +
                                   quote((d / "ck").string()) + " --metrics " + quote(m.string())),
                         d / "log.txt");
  const pid_t rz = spawned_ringzero(sh);
  REQUIRE(wait_for([&] { return !metric_steps(m).empty(); }, 60));  // step 1 is done: its sample runs
  REQUIRE(kill(rz, SIGTERM) == 0);
  const int status = wait_bounded(sh, 30);
  INFO(slurp(d / "log.txt"));
  CHECK(status == 128 + SIGTERM);
  const std::vector<std::string> saved = complete_steps(d / "ck");
  REQUIRE(saved.size() == 1);
  CHECK(std::stoi(saved[0].substr(5)) == metric_steps(m).back());
}

TEST_CASE("a long evaluation stops at SIGTERM and saves") {
  const fs::path d = work_dir() / "long_eval";
  fs::remove_all(d);
  fs::create_directories(d);
  const fs::path log = d / "log.txt";
  const pid_t sh = spawn(tiny_args("--steps 1000 --val-data " + quote((data_dir() / "val_*.bin").string()) +
                                   " --eval-every 1 --eval-batches 100000000 --save-dir " + quote((d / "ck").string())),
                         log);
  const pid_t rz = spawned_ringzero(sh);
  // The memory report follows step 1, right before its evaluation.
  REQUIRE(wait_for([&] { return slurp(log).find("peak total") != std::string::npos; }, 60));
  REQUIRE(kill(rz, SIGTERM) == 0);
  const int status = wait_bounded(sh, 30);
  INFO(slurp(log));
  CHECK(status == 128 + SIGTERM);
  CHECK(complete_steps(d / "ck").size() == 1);
  CHECK(slurp(log).find("checkpoint") != std::string::npos);
}

TEST_CASE("what cannot fit in memory is refused up front, naming the planned and the available bytes") {
  // Under ulimit -v, so that a regression fails on an allocation instead of taking the machine
  // (not under a sanitizer, whose shadow memory does not fit under it).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::string limit;
#else
  const std::string limit = "ulimit -v 4000000;";
#endif
  Result b = run("bench-step --model d48 --batch 4096 --seq 1048576 --max-seq 1048576", 60, limit);
  check_one_line_error(b, "bench-step: planned ");
  CHECK(last_line(b.output).find("TiB per rank (an upper estimate") != std::string::npos);
  CHECK(last_line(b.output).find("is available (") != std::string::npos);
  Result c = run("comm-bench --nproc 2 --max-bytes 60G --iters 1 --warmup 0", 60, limit);
  check_one_line_error(c, "comm-bench: planned 180.00 GiB per rank (the tensor and its shard at --max-bytes, twice) x 2 "
                          "ranks = 360.00 GiB, but only ");
  Result t = run(tiny_args("--steps 1 --channels 8192 --layers 60"), 60, limit);  // 48e9 parameters: 770 GB
  check_one_line_error(t, "memory: planned ");
  CHECK(last_line(t.output).find("(model states ") != std::string::npos);
  CHECK(last_line(t.output).find("is available (") != std::string::npos);
}

TEST_CASE("prepare on input without text says so and exits non-zero, leaving --out as it was") {
  const fs::path d = work_dir() / "empty_text";
  fs::create_directories(d);
  std::ofstream(d / "a.txt").close();
  std::ofstream(d / "b.txt").close();
  const fs::path out = work_dir() / "empty_out";
  Result r = run("prepare --input " + quote(d.string()) + " --out " + quote(out.string()));
  check_one_line_error(r, "--input: no text in 2 file(s) (0 bytes, 2 empty document(s)): nothing to prepare");
  CHECK(!fs::exists(out / "meta.json"));
}

TEST_CASE("prepare stopped by SIGTERM keeps --out as it was and leaves no half-built directory") {
  const fs::path out = work_dir() / "stopped_prep";
  Result first = run("prepare --input " + quote(write_text("stop_small", 2, 50).string()) + " --out " +
                     quote(out.string()));
  REQUIRE(first.status == 0);
  const std::string meta = slurp(out / "meta.json");
  const fs::path big = write_text("stop_big", 8, 400000);  // about 100 MB: seconds of tokenizing
  const pid_t sh = spawn("prepare --input " + quote(big.string()) + " --out " + quote(out.string()),
                         work_dir() / "stop_prep.log");
  const pid_t rz = spawned_ringzero(sh);
  auto staging = [&] {
    std::vector<fs::path> out_dirs;
    for (const auto& e : fs::directory_iterator(work_dir()))
      if (e.path().filename().string().rfind(".stopped_prep.prepare.", 0) == 0) out_dirs.push_back(e.path());
    return out_dirs;
  };
  // Polled every millisecond: tokenizing the text takes about half a second here.
  const auto t0 = std::chrono::steady_clock::now();
  while (staging().empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(kill(rz, SIGTERM) == 0);
  const int status = wait_bounded(sh, 30);
  const std::string log = slurp(work_dir() / "stop_prep.log");
  INFO(log);
  CHECK(status == 128 + SIGTERM);
  CHECK(log.find("stopped by SIGTERM while reading") != std::string::npos);
  CHECK(staging().empty());
  CHECK(slurp(out / "meta.json") == meta);
}
