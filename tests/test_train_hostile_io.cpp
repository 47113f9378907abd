// Nothing lost (issue 26), each case a real process: an output path over one of the run's
// inputs is refused before any work, however the path is spelt; an output whose last
// component is not a regular file is refused (/dev/null discards); --overwrite and --keep
// delete only what ringzero wrote; a file-size limit is an error naming the rank, the file
// and the reason, with no temporary file left. What users do on purpose keeps working:
// symlinked run and data directories, /dev/null, resuming into the same save-dir.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "tests/hostile_util.h"

namespace fs = std::filesystem;
using namespace rz::test::hostile;
using rz::test::quote;

namespace {

// A file's bytes, to prove it was not touched.
std::string bytes_of(const fs::path& p) { return slurp(p); }

// Every path under root whose name holds ".tmp." (a temporary an atomic write left).
std::vector<std::string> temporaries(const fs::path& root) {
  std::vector<std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
  return out;
}

// A model file for --init: the model.bin of a one-step run.
fs::path init_model() {
  static const fs::path model = [] {
    const fs::path ck = work_dir() / "init_src";
    Result r = run(tiny_args("--steps 1 --save-dir " + quote(ck.string())));
    REQUIRE(r.status == 0);
    return ck / "step_00000001" / "model.bin";
  }();
  return model;
}

}  // namespace

TEST_CASE("an output over an input is refused before any work, however the path is spelt") {
  const fs::path d = data_dir();
  const fs::path shard = d / "train_000000.bin";
  const fs::path cfg = work_dir() / "run.toml";
  std::ofstream(cfg) << "steps = 1\n";
  const fs::path hard = work_dir() / "hard_link.bin";
  fs::remove(hard);
  fs::create_hard_link(shard, hard);
  const fs::path dlink = work_dir() / "data_link";
  if (!fs::exists(dlink)) fs::create_directory_symlink(d, dlink);
  const fs::path model = init_model();
  const std::string shard_before = bytes_of(shard), cfg_before = bytes_of(cfg), model_before = bytes_of(model);
  struct Case {
    std::string flag, path;
  };
  const std::vector<Case> cases = {
      {"--metrics", shard.string()},
      {"--metrics", (d / ".." / d.filename() / "train_000000.bin").string()},
      {"--metrics", hard.string()},
      {"--metrics", (dlink / "train_000000.bin").string()},
      {"--trace", (d / "val_000000.bin").string()},
      {"--trace", (d / "meta.json").string()},
      {"--memory-report", (d / "tokenizer.bin").string()},
      {"--memory-report", cfg.string()},
      {"--metrics", model.string()},
  };
  for (const Case& c : cases) {
    const std::string trace = c.flag == "--trace" ? " --trace-steps 1:1" : "";
    Result r = run("train " + quote(cfg.string()) + " " +
                   tiny_args("--val-data " + quote((d / "val_*.bin").string()) + " --init " + quote(model.string()) +
                             " " + c.flag + " " + quote(c.path) + trace)
                       .substr(6));  // "train " goes first, the config after it
    INFO(c.flag << " " << c.path << "\n" << r.output);
    CHECK(r.status == 1);
    CHECK(last_line(r.output).find("an output never replaces an input") != std::string::npos);
    CHECK(r.output.find("step 1") == std::string::npos);
  }
  CHECK(bytes_of(shard) == shard_before);
  CHECK(bytes_of(cfg) == cfg_before);
  CHECK(bytes_of(model) == model_before);
  // A save-dir that holds an input (the --init model inside a checkpoint it would overwrite).
  const fs::path ck = model.parent_path().parent_path();
  Result s = run(tiny_args("--steps 1 --overwrite --init " + quote(model.string()) + " --save-dir " + quote(ck.string())));
  INFO(s.output);
  CHECK(s.status == 1);
  CHECK(last_line(s.output).find("holds the init model") != std::string::npos);
  CHECK(bytes_of(model) == model_before);
  Result sd = run(tiny_args("--steps 1 --save-dir " + quote(d.string())));
  CHECK(last_line(sd.output).find("save_dir: " + d.string() + " holds the data shard") != std::string::npos);
  // Nor over the run's own checkpoints: one that a resume reads, or one a later save makes.
  Result in_ck = run(tiny_args("--steps 2 --resume --save-dir " + quote(ck.string()) + " --metrics " +
                               quote((ck / "step_00000001" / "model.bin").string())));
  CHECK(last_line(in_ck.output).find("lies inside the checkpoint") != std::string::npos);
  Result later = run(tiny_args("--steps 2 --resume --save-dir " + quote(ck.string()) + " --trace " +
                               quote((ck / "step_00000002" / "t.json").string()) + " --trace-steps 1:2"));
  CHECK(last_line(later.output).find("lies inside a checkpoint directory of save_dir") != std::string::npos);
  CHECK(bytes_of(model) == model_before);
  // prepare: --out holding, being or inside an input; plot and bench-strategies likewise.
  const fs::path text = work_dir() / "text";
  Result p1 = run("prepare --input " + quote((d / "meta.json").string()) + " --out " + quote(d.string()));
  CHECK(last_line(p1.output).find("holds the --input") != std::string::npos);
  Result p2 = run("prepare --input " + quote(text.string()) + " --out " + quote((text / "shards").string()));
  CHECK(last_line(p2.output).find("lies inside the --input") != std::string::npos);
  CHECK(bytes_of(d / "meta.json").size() > 0);
  const fs::path png = work_dir() / "looks_like.png";
  std::ofstream(png) << "{\"step\": 1, \"loss\": 2.0}\n";
  Result pl = run("plot loss --metrics " + quote(png.string()) + " --out " + quote(png.string()));
  CHECK(last_line(pl.output).find("--out: " + png.string() + " is the input") != std::string::npos);
  const fs::path toml_as_trace = work_dir() / "bench.ddp.json";
  std::ofstream(toml_as_trace) << "batch = 2\n";
  Result bs = run("bench-strategies --config " + quote(toml_as_trace.string()) + " --trace " +
                  quote((work_dir() / "bench.json").string()));
  CHECK(last_line(bs.output).find("is the config file") != std::string::npos);
  CHECK(bytes_of(toml_as_trace) == "batch = 2\n");
}

TEST_CASE("an output that exists and is not a regular file is refused; /dev/null discards") {
  const fs::path w = work_dir() / "nonregular";
  fs::create_directories(w);
  const fs::path victim = w / "victim.txt", fifo = w / "fifo", dir = w / "dir", link = w / "link";
  std::ofstream(victim) << "precious";
  if (!fs::exists(fifo)) REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  fs::create_directories(dir);
  if (!fs::exists(link)) fs::create_symlink(victim, link);
  for (const char* flag : {"--metrics", "--memory-report", "--trace"})
    for (const fs::path& p : {fifo, dir, link}) {
      const std::string trace = std::string(flag) == "--trace" ? " --trace-steps 1:1" : "";
      Result r = run(tiny_args("--steps 1 " + std::string(flag) + " " + quote(p.string()) + trace), 30);
      INFO(flag << " " << p << "\n" << r.output);
      CHECK(r.status == 1);  // not 124: a FIFO must not block the run
      CHECK(last_line(r.output).find("exists and is a") != std::string::npos);
    }
  CHECK(fs::is_fifo(fifo));
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_symlink(link));
  CHECK(bytes_of(victim) == "precious");
  Result n = run(tiny_args("--steps 2 --metrics /dev/null --memory-report /dev/null --trace /dev/null --trace-steps 1:2"));
  INFO(n.output);
  CHECK(n.status == 0);
  struct stat st {};
  REQUIRE(stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  // Two outputs naming one file: one would silently replace the other.
  Result two = run(tiny_args("--steps 1 --metrics " + quote((w / "m.json").string()) + " --memory-report " +
                             quote((w / "." / "m.json").string())));
  CHECK(last_line(two.output).find("is the same file as the metrics output") != std::string::npos);
}

TEST_CASE("symlinked run and data directories, and resuming into the same save-dir, keep working") {
  const fs::path real = work_dir() / "real_run";
  fs::create_directories(real);
  const fs::path run_link = work_dir() / "run_link";
  if (!fs::exists(run_link)) fs::create_directory_symlink(real, run_link);
  const fs::path data_link = work_dir() / "data_link2";
  if (!fs::exists(data_link)) fs::create_directory_symlink(data_dir(), data_link);
  const std::string common = "train --model tiny --data " + quote((data_link / "train_*.bin").string()) +
                             " --batch 4 --seq 32 --threads 1 --save-dir " + quote((run_link / "ck").string()) +
                             " --metrics " + quote((run_link / "m.jsonl").string());
  Result a = run(common + " --steps 2");
  INFO(a.output);
  REQUIRE(a.status == 0);
  Result b = run(common + " --steps 4 --resume");
  INFO(b.output);
  CHECK(b.status == 0);
  CHECK(b.output.find("resumed from") != std::string::npos);
  CHECK(metric_steps(real / "m.jsonl") == std::vector<int>{1, 2, 3, 4});
  // prepare into a link to a directory: the link stays, the shards land where it points.
  const fs::path shards = work_dir() / "real_shards", shards_link = work_dir() / "shards_link";
  fs::create_directories(shards);
  if (!fs::exists(shards_link)) fs::create_directory_symlink(shards, shards_link);
  Result p = run("prepare --quiet --input " + quote((work_dir() / "text").string()) + " --out " +
                 quote(shards_link.string()));
  INFO(p.output);
  CHECK(p.status == 0);
  CHECK(fs::is_symlink(shards_link));
  CHECK(fs::exists(shards / "train_000000.bin"));
}

TEST_CASE("--overwrite and --keep delete only what ringzero wrote, and name the rest") {
  const fs::path ck = work_dir() / "foreign_ck";
  fs::remove_all(ck);
  REQUIRE(run(tiny_args("--steps 3 --save-every 1 --save-dir " + quote(ck.string()))).status == 0);
  const fs::path elsewhere = work_dir() / "elsewhere_ck";
  fs::create_directories(elsewhere);
  std::ofstream(elsewhere / "model.bin") << "kept";
  // The three, and more of the same kind.
  fs::create_directories(ck / "step_99999999");
  std::ofstream(ck / "step_99999999" / "mydata") << "1";
  fs::create_directories(ck / "step_abc");
  std::ofstream(ck / "step_abc" / "f") << "2";
  std::ofstream(ck / "step_00000002" / "extra.txt") << "3";
  fs::create_directories(ck / "step_000000002");
  std::ofstream(ck / "step_000000002" / "model.bin") << "4";
  fs::create_directories(ck / "step_-1");
  std::ofstream(ck / "step_-1" / "rank_00000.state") << "5";
  fs::create_directories(ck / "step_00000003" / "sub");
  std::ofstream(ck / "step_00000003" / "sub" / "deep") << "6";
  std::ofstream(ck / "step_00000001" / "rank_00009.state") << "7: not a rank state";
  fs::create_directory_symlink(elsewhere, ck / "step_00000007");
  const std::vector<fs::path> foreign = {ck / "step_99999999" / "mydata",   ck / "step_abc" / "f",
                                         ck / "step_00000002" / "extra.txt", ck / "step_000000002" / "model.bin",
                                         ck / "step_-1" / "rank_00000.state", ck / "step_00000003" / "sub" / "deep",
                                         ck / "step_00000001" / "rank_00009.state", elsewhere / "model.bin"};
  Result o = run(tiny_args("--steps 1 --overwrite --save-dir " + quote(ck.string())));
  INFO(o.output);
  REQUIRE(o.status == 0);
  for (const fs::path& f : foreign) CHECK(fs::exists(f));
  CHECK(o.output.find("--overwrite left what ringzero did not write") != std::string::npos);
  CHECK(o.output.find((ck / "step_00000002" / "extra.txt").string()) != std::string::npos);
  CHECK(o.output.find((ck / "step_99999999" / "mydata").string()) != std::string::npos);
  CHECK(!fs::exists(ck / "step_00000002" / "model.bin"));  // ringzero's own files went
  CHECK(!fs::exists(ck / "step_00000003" / "COMPLETE"));
  CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000001"});
  // Pruning with --keep: the same rule.
  const fs::path kp = work_dir() / "keep_ck";
  fs::remove_all(kp);
  fs::create_directories(kp / "step_00000001");
  std::ofstream(kp / "step_00000001" / "notes.md") << "mine";
  Result k = run(tiny_args("--steps 4 --save-every 1 --keep 1 --save-dir " + quote(kp.string()) + " --resume auto"));
  INFO(k.output);
  CHECK(k.status == 0);
  CHECK(complete_steps(kp) == std::vector<std::string>{"step_00000004"});
  CHECK(bytes_of(kp / "step_00000001" / "notes.md") == "mine");
  CHECK(k.output.find("pruning old checkpoints left what ringzero did not write") != std::string::npos);
}

TEST_CASE("a file-size limit is an error naming each rank's file and reason, with no temporary left") {
  // sh's ulimit -f sets RLIMIT_FSIZE for the ranks; SIGXFSZ is ignored, so write() says EFBIG.
  // The rank files (about 750 KB each under zero2 here) exceed the limit; the metrics lines stay under it.
  const fs::path ck = work_dir() / "fsize_ck";
  fs::remove_all(ck);
  Result r = run(tiny_args("--nproc-per-node 2 --transport tcp --strategy zero2 --steps 2 --save-dir " +
                           quote(ck.string()) + " --metrics " + quote((work_dir() / "fsize.jsonl").string())),
                 120, "ulimit -f 400;");
  INFO(r.output);
  CHECK(r.status == 1);  // not 128 + SIGXFSZ (153)
  CHECK(r.output.find("signal") == std::string::npos);
  CHECK(r.output.find("[rank 1] ringzero: rank 1: could not write its part of checkpoint") != std::string::npos);
  CHECK(r.output.find("rank_00001.state: write failed: File too large") != std::string::npos);
  CHECK(r.output.find("rank_00000.state: write failed: File too large") != std::string::npos);
  CHECK(last_line(r.output).find("the final checkpoint at step 2 could not be saved") != std::string::npos);
  CHECK(temporaries(ck).empty());
  CHECK(complete_steps(ck).empty());
  // The metrics file and prepare's shards the same way, and prepare leaves no staging directory.
  Result m = run(tiny_args("--steps 40 --metrics " + quote((work_dir() / "fsize_m.jsonl").string())), 120, "ulimit -f 1;");
  CHECK(m.status == 1);
  CHECK(last_line(m.output).find("metrics: cannot write") != std::string::npos);
  CHECK(last_line(m.output).find("File too large") != std::string::npos);
  const fs::path out = work_dir() / "fsize_prep";
  Result p = run("prepare --quiet --input " + quote((work_dir() / "text").string()) + " --out " + quote(out.string()),
                 120, "ulimit -f 8;");
  CHECK(p.status == 1);
  CHECK(last_line(p.output).find("write failed: File too large") != std::string::npos);
  for (const auto& e : fs::directory_iterator(work_dir()))
    CHECK(e.path().filename().string().rfind(".fsize_prep.prepare.", 0) != 0);
  CHECK(temporaries(out).empty());
}

TEST_CASE("a full file system is an error naming the file, with no temporary left") {
  // A 1 MiB tmpfs in a user and mount namespace (no root needed where user namespaces are
  // allowed): two ranks' 750 KB optimizer shards do not fit.
  const fs::path mnt = work_dir() / "small_fs";
  fs::create_directories(mnt);
  const std::string inner = "mount -t tmpfs -o size=1m none " + quote(mnt.string()) + " || exit 99; timeout -k 5 120 " +
                            quote(RINGZERO_BINARY) + " " +
                            tiny_args("--nproc-per-node 2 --transport tcp --strategy zero2 --steps 2 --save-dir " +
                                      quote((mnt / "ck").string())) +
                            "; echo \"ringzero exited $?\"; ls -R " + quote(mnt.string());
  std::string quoted;  // inner as one single-quoted sh argument
  for (char c : inner) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  FILE* p = popen(("unshare -rm sh -c '" + quoted + "' 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int st = pclose(p);
  const int status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (status == 99 || output.find("unshare") != std::string::npos) {
    WARN("skipped: no user and mount namespace here for a small tmpfs (the file-size limit case covers the writes)");
    return;
  }
  INFO(output);
  CHECK(output.find("ringzero exited 1") != std::string::npos);
  CHECK(output.find("No space left on device") != std::string::npos);
  CHECK(output.find("could not be saved") != std::string::npos);
  CHECK(output.find(".tmp.") == std::string::npos);  // ls -R of the file system after the run
  CHECK(output.find("COMPLETE") == std::string::npos);
}
