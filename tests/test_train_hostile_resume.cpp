// Issue 40, section 5: resume that trusts nothing. A checkpoint is verified file by file
// against what each file's own header and the model's shape say, not only against its
// manifest, and only regular files are read (a FIFO is never opened: it would block):
//   - model.bin truncated with a manifest rewritten to match: `--resume yes` names the file
//     and the newest intact checkpoint; `--resume auto` falls back to it, saying why in one
//     line (before: "intact", and its model.bin was unusable by `sample`);
//   - model.bin replaced by a FIFO, or a rank's state file by a link to /dev/zero (before: a
//     raw "filesystem error: cannot get file size"): the same, naming the file;
//   - the damaged checkpoint is moved aside (step_N.damaged), so --keep keeps what this run
//     saves instead of the damaged one, and the save of its step is not refused.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "tests/hostile_util.h"

namespace fs = std::filesystem;
using namespace rz::test::hostile;
using rz::test::quote;

namespace {

// Checkpoints at steps 2 and 4 of one short run, made once; each case damages a copy.
fs::path pristine_checkpoints() {
  static const fs::path ck = [] {
    const fs::path dir = work_dir() / "resume_src";
    fs::remove_all(dir);
    Result r = run(tiny_args("--steps 4 --save-every 2 --save-dir " + quote(dir.string())));
    INFO(r.output);
    REQUIRE(r.status == 0);
    REQUIRE(complete_steps(dir) == std::vector<std::string>{"step_00000002", "step_00000004"});
    return dir;
  }();
  return ck;
}

fs::path fresh_copy(const std::string& name) {
  const fs::path dir = work_dir() / name;
  fs::remove_all(dir);
  fs::copy(pristine_checkpoints(), dir, fs::copy_options::recursive);
  fs::remove(dir / "ringzero.lock");
  return dir;
}

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// model.bin cut short by 4 KiB, and the manifest rewritten so its size and checksum agree.
void truncate_model_consistently(const fs::path& step) {
  const fs::path model = step / "model.bin";
  std::string bytes = slurp(model);
  bytes.resize(bytes.size() - 4096);
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
  nlohmann::json m = nlohmann::json::parse(slurp(step / "COMPLETE"));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  m["files"]["model.bin"] = {{"bytes", bytes.size()}, {"fnv64", hex}};
  std::ofstream(step / "COMPLETE", std::ios::trunc) << m.dump(2) << "\n";
}

struct Damage {
  std::string name;
  std::function<void(const fs::path& step)> apply;
  std::string says;  // what the error says about the file
  std::string file;  // the file it names, inside step_00000004
};

}  // namespace

TEST_CASE("a damaged newest checkpoint is named; --resume auto falls back to the newest that verifies") {
  const std::vector<Damage> cases = {
      {"truncated", truncate_model_consistently, "bytes, but its header (L=2 C=64", "model.bin"},
      {"fifo",
       [](const fs::path& step) {
         fs::remove(step / "model.bin");
         REQUIRE(mkfifo((step / "model.bin").c_str(), 0644) == 0);
       },
       "is a FIFO, not a regular file", "model.bin"},
      {"dev_zero",
       [](const fs::path& step) {
         fs::remove(step / "rank_00000.state");
         fs::create_symlink("/dev/zero", step / "rank_00000.state");
       },
       "is a symbolic link, not a regular file", "rank_00000.state"},
  };
  for (const Damage& d : cases) {
    const fs::path ck = fresh_copy("resume_" + d.name);
    const fs::path step4 = ck / "step_00000004";
    d.apply(step4);
    const std::string named = (step4 / d.file).string();
    // yes: the newest must verify; the error names the file, why, and the one auto would take.
    Result yes = run(tiny_args("--steps 4 --resume yes --save-dir " + quote(ck.string())), 60);
    INFO(d.name << "\n" << yes.output);
    CHECK(yes.status == 1);
    const std::string line = last_line(yes.output);
    CHECK(line.find(named) != std::string::npos);
    CHECK(line.find(d.says) != std::string::npos);
    CHECK(line.find("the newest intact one is " + (ck / "step_00000002").string()) != std::string::npos);
    CHECK(yes.output.find("filesystem error") == std::string::npos);
    // auto: one line on what was wrong with the newer one, then the resume from the older.
    // The damaged one is moved aside whole: --keep 1 keeps this run's step 3, not it.
    Result aut = run(tiny_args("--steps 3 --keep 1 --resume auto --save-dir " + quote(ck.string())), 60);
    INFO(aut.output);
    CHECK(aut.status == 0);
    const size_t skip = aut.output.find("resume auto: skipped damaged checkpoint " + step4.string() + ": ");
    REQUIRE(skip != std::string::npos);
    const std::string skip_line = aut.output.substr(skip, aut.output.find('\n', skip) - skip);
    CHECK(skip_line.find(named) != std::string::npos);
    CHECK(skip_line.find(d.says) != std::string::npos);
    CHECK(skip_line.find("(moved aside to " + step4.string() + ".damaged)") != std::string::npos);
    CHECK(aut.output.find("resumed from " + (ck / "step_00000002").string() + ": step 2") != std::string::npos);
    CHECK(aut.output.find("step 3/3") != std::string::npos);
    // (kept whole, COMPLETE and all; its name is no step directory's, so no resume reads it)
    CHECK(complete_steps(ck) == std::vector<std::string>{"step_00000003", "step_00000004.damaged"});
    CHECK(fs::exists(fs::symlink_status(ck / "step_00000004.damaged" / d.file)));
    Result again = run(tiny_args("--steps 3 --resume yes --save-dir " + quote(ck.string())), 60);
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(again.output.find("nothing to do: the checkpoint is at step 3") != std::string::npos);
  }
}

TEST_CASE("the truncated model.bin a consistent manifest vouched for is unusable by sample: so resume refuses it") {
  const fs::path ck = fresh_copy("resume_sample");
  truncate_model_consistently(ck / "step_00000004");
  Result s = run("sample --model " + quote((ck / "step_00000004").string()) + " --tokens 4", 60);
  INFO(s.output);
  CHECK(s.status == 1);
  CHECK(last_line(s.output).find("but its header") != std::string::npos);
  Result ok = run("sample --model " + quote((ck / "step_00000002").string()) + " --tokens 4", 60);
  CHECK(ok.status == 0);
}
