// The checkpoint container: round trip, re-assembly from shards, and every kind of damage
// gives a one-line error naming the file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/check.h"
#include "base/file.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;
using namespace rz;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("rz_test_ckpt_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Rank r of 2 owns [r*5, r*5+5) of a 10-element layout; value = element index (+100 for m, +200 for v).
RankState shard_state(int r) {
  RankState s;
  s.rank = r;
  s.world = 2;
  s.step = 7;
  s.optimizer_step = 7;
  s.layout_total = 10;
  s.ranges = {{static_cast<uint64_t>(r * 5), static_cast<uint64_t>(r * 5 + 5)}};
  for (int i = r * 5; i < r * 5 + 5; ++i) {
    s.master.push_back(static_cast<float>(i));
    s.m.push_back(100.0f + i);
    s.v.push_back(200.0f + i);
  }
  s.loader_epoch = 1;
  s.loader_next_window = 40 + static_cast<uint64_t>(r);
  s.rng_state = 99;
  return s;
}

fs::path write_two_rank_checkpoint(const fs::path& save_dir, uint64_t step = 7) {
  const fs::path dir = checkpoint_dir_name(save_dir.string(), step);
  fs::create_directories(dir);
  std::string model = "pretend llm.c model bytes";
  write_file_atomic((dir / "model.bin").string(), model);
  for (int r = 0; r < 2; ++r) {
    RankState s = shard_state(r);
    s.step = step;
    write_rank_state((dir / rank_state_name(r)).string(), s);
  }
  write_manifest(dir.string(), step, 2, "zero2", "fp32");
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void flip_byte(const fs::path& p, size_t offset) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("rank state round trip is exact") {
  const fs::path d = fresh_dir("roundtrip");
  RankState s = shard_state(1);
  write_rank_state((d / "r.state").string(), s);
  CHECK_FALSE(fs::exists(d / "r.state.tmp"));
  RankState t = read_rank_state((d / "r.state").string());
  CHECK(t.rank == 1);
  CHECK(t.world == 2);
  CHECK(t.step == 7);
  CHECK(t.ranges == s.ranges);
  CHECK(t.master == s.master);
  CHECK(t.m == s.m);
  CHECK(t.v == s.v);
  CHECK(t.loader_next_window == 41);
  CHECK(t.rng_state == 99);
}

TEST_CASE("a two-rank checkpoint assembles into full arrays; newest complete one is found") {
  const fs::path save = fresh_dir("assemble");
  write_two_rank_checkpoint(save, 5);
  const fs::path dir = write_two_rank_checkpoint(save, 7);
  fs::create_directories(checkpoint_dir_name(save.string(), 9));  // an interrupted save: no COMPLETE
  auto list = list_complete_checkpoints(save.string());
  REQUIRE(list.size() == 2);
  CHECK(list.back().first == 7);
  LoadedCheckpoint ck = load_checkpoint(dir.string(), 10);
  CHECK(ck.step == 7);
  CHECK(ck.manifest.world == 2);
  CHECK(ck.manifest.strategy == "zero2");
  REQUIRE(ck.ranks.size() == 2);
  CHECK(ck.ranks[1].loader_next_window == 41);
  CHECK(ck.ranks[1].master.empty());  // the arrays stay in the files until read
  // Read back as a new rank that needs master values for [2, 9) and owns m, v of [3, 4) and
  // [6, 8), with 2-float chunks: each chunk read from the file that holds it.
  std::vector<float> got[3] = {std::vector<float>(10, -1.0f), std::vector<float>(10, -1.0f),
                               std::vector<float>(10, -1.0f)};
  std::vector<std::pair<int, uint64_t>> chunks;
  StateTarget target;
  target.master_ranges = {{2, 9}};
  target.moment_ranges = {{6, 8}, {3, 4}};
  target.chunk_elems = 2;
  target.put = [&](int array, uint64_t begin, const float* data, size_t n) {
    CHECK(n <= 2);
    chunks.emplace_back(array, begin);
    for (size_t i = 0; i < n; ++i) got[array][begin + i] = data[i];
  };
  read_checkpoint_state(ck, target);
  for (int i = 0; i < 10; ++i) {
    CHECK(got[kStateMaster][i] == (i >= 2 && i < 9 ? static_cast<float>(i) : -1.0f));
    const bool moment = i == 3 || i == 6 || i == 7;
    CHECK(got[kStateM][i] == (moment ? 100.0f + i : -1.0f));
    CHECK(got[kStateV][i] == (moment ? 200.0f + i : -1.0f));
  }
  // rank 0's file [0, 5): master [2, 4) [4, 5); rank 1's [5, 10): [5, 7) [7, 9).
  CHECK(std::count_if(chunks.begin(), chunks.end(), [](auto c) { return c.first == kStateMaster; }) == 4);
  prune_checkpoints(save.string(), 1);
  CHECK_FALSE(fs::exists(checkpoint_dir_name(save.string(), 5)));
  CHECK(fs::exists(dir));
  CHECK(fs::exists(checkpoint_dir_name(save.string(), 9)));  // newer than 7: may still be in progress
}

TEST_CASE("damaged checkpoints give one-line errors naming the file") {
  const fs::path save = fresh_dir("damage");
  const fs::path dir = write_two_rank_checkpoint(save);
  const std::string r1 = (dir / rank_state_name(1)).string();
  const std::string model = (dir / "model.bin").string();

  SECTION("corrupted rank file") {
    flip_byte(r1, 200);
    CHECK(error_of([&] { read_rank_state(r1); }) == r1 + ": checksum mismatch (the file is corrupted)");
    CHECK(error_of([&] { load_checkpoint(dir.string(), 10); }) == r1 + ": checksum mismatch (the file is corrupted)");
  }
  SECTION("truncated rank file") {
    fs::resize_file(r1, fs::file_size(r1) - 4);
    CHECK(error_of([&] { read_rank_state(r1); }).find(r1 + ": truncated or corrupted rank state") == 0);
    CHECK(error_of([&] { load_checkpoint(dir.string(), 10); }).find(r1 + ": truncated") == 0);
    fs::resize_file(r1, 20);
    CHECK(error_of([&] { read_rank_state(r1); }).find(r1 + ": truncated rank state") == 0);
  }
  SECTION("a header that claims a giant size is refused before allocating") {
    flip_byte(r1, 8 * 8 + 5);  // nfloats
    CHECK(error_of([&] { read_rank_state(r1); }).find(r1 + ": truncated or corrupted") == 0);
  }
  SECTION("corrupted model file") {
    flip_byte(model, 3);
    CHECK(error_of([&] { load_checkpoint(dir.string(), 10); }) == model + ": checksum mismatch (the file is corrupted)");
  }
  SECTION("truncated model file") {
    fs::resize_file(model, 4);
    CHECK(error_of([&] { load_checkpoint(dir.string(), 10); }).find(model + ": truncated") == 0);
  }
  SECTION("a model of another size") {
    CHECK(error_of([&] { load_checkpoint(dir.string(), 12); }).find("written for a model with 10 parameters, this model has 12") != std::string::npos);
  }
  SECTION("malformed manifest") {
    std::ofstream((dir / "COMPLETE").string()) << "{ not json";
    CHECK(error_of([&] { load_checkpoint(dir.string(), 10); }).find((dir / "COMPLETE").string() + ": malformed checkpoint manifest") == 0);
  }
  SECTION("a manifest whose integers are huge floats or negative (found by fuzzing)") {
    const std::string complete = (dir / "COMPLETE").string();
    for (const char* step : {"4e99", "-3", "1.5"}) {
      std::ofstream(complete) << "{\"format\":\"ringzero-checkpoint\",\"step\":" << step
                              << ",\"world\":1,\"strategy\":\"ddp\",\"precision\":\"fp32\",\"files\":{}}";
      CHECK(error_of([&] { load_checkpoint(dir.string(), 10); }) ==
            complete + ": \"step\" is not an integer in [0, 18446744073709551615]");
    }
  }
}

TEST_CASE("only directories named exactly as a save names them are checkpoints") {
  CHECK(parse_step_dir_name("step_00000002") == std::optional<uint64_t>(2));
  CHECK(parse_step_dir_name("step_123456789") == std::optional<uint64_t>(123456789));
  for (const char* name : {"step_abc", "step_-1", "step_+0000002", "step_ 0000002", "step_000000002", "step_0000002",
                           "step_00000002x", "step_", "step_99999999999999999999", "Step_00000002"})
    CHECK_FALSE(parse_step_dir_name(name).has_value());
}

TEST_CASE("removing a checkpoint deletes what a save wrote and leaves everything else, named") {
  const fs::path save = fresh_dir("remove");
  const fs::path dir = write_two_rank_checkpoint(save, 2);
  std::ofstream(dir / "extra.txt") << "mine";
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "model.bin.tmp.123") << "a save killed midway";
  std::ofstream(dir / "notes.tmp.12") << "a user's file that only looks temporary";
  fs::create_symlink("/etc/hostname", dir / "rank_00007.state");
  std::vector<std::string> left = remove_checkpoint_dir(dir.string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{(dir / "extra.txt").string(), (dir / "notes.tmp.12").string(),
                                         (dir / "rank_00007.state").string(), (dir / "sub").string()});
  CHECK_FALSE(fs::exists(dir / "COMPLETE"));
  CHECK_FALSE(fs::exists(dir / "model.bin"));
  CHECK_FALSE(fs::exists(dir / "rank_00000.state"));
  CHECK_FALSE(fs::exists(dir / "model.bin.tmp.123"));
  CHECK(fs::exists(dir / "extra.txt"));
  // Without a manifest (an interrupted save) a file under a save's name goes only if its
  // format's magic says a save wrote it.
  const fs::path partial = checkpoint_dir_name(save.string(), 3);
  fs::create_directories(partial);
  std::ofstream(partial / "model.bin") << "a user's own model.bin, not llm.c's format";
  write_rank_state((partial / rank_state_name(0)).string(), shard_state(0));
  std::ofstream(partial / rank_state_name(1)) << "not a rank state";
  left = remove_checkpoint_dir(partial.string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{(partial / "model.bin").string(), (partial / rank_state_name(1)).string()});
  // A directory link at a step's name is not descended into.
  const fs::path elsewhere = fresh_dir("elsewhere");
  write_rank_state((elsewhere / rank_state_name(0)).string(), shard_state(0));
  fs::create_directory_symlink(elsewhere, checkpoint_dir_name(save.string(), 4));
  CHECK(list_step_dirs(save.string()) ==
        std::vector<std::string>{dir.string(), partial.string()});  // links are not step directories
  CHECK(remove_checkpoint_dir(checkpoint_dir_name(save.string(), 4)).size() == 1);
  CHECK(fs::exists(elsewhere / rank_state_name(0)));
}

TEST_CASE("a manifest names only a checkpoint's own files, and a bad field by its name") {
  const fs::path save = fresh_dir("manifest_fields");
  const fs::path dir = write_two_rank_checkpoint(save, 2);
  const std::string complete = (dir / "COMPLETE").string();
  auto with = [&](const std::string& files, const std::string& rest = "\"strategy\":\"ddp\",\"precision\":\"fp32\"") {
    std::ofstream(complete) << "{\"format\":\"ringzero-checkpoint\",\"step\":2,\"world\":1," << rest
                            << ",\"files\":" << files << "}";
    return error_of([&] { read_manifest(dir.string()); });
  };
  CHECK(with("{\"../../etc/passwd\":{\"bytes\":1,\"fnv64\":\"0000000000000000\"}}")
            .find("lists \"../../etc/passwd\", which is not a file a checkpoint holds") != std::string::npos);
  CHECK(with("{\"model.bin\":{\"bytes\":1}}") == complete + ": file \"model.bin\": no \"fnv64\" field");
  CHECK(with("{\"model.bin\":{\"bytes\":1,\"fnv64\":7}}") == complete + ": file \"model.bin\": \"fnv64\" is not a string");
  CHECK(with("{}", "\"strategy\":3,\"precision\":\"fp32\"") == complete + ": \"strategy\" is not a string");
  CHECK(with("{}", "\"precision\":\"fp32\"") == complete + ": no \"strategy\" field");
  CHECK(with("[]") == complete + ": \"files\" is not an object of name -> {bytes, fnv64}");
}

TEST_CASE("a re-save of a step removes the temporaries a killed save left, and nothing else") {
  const fs::path dir = fresh_dir("stale_tmp") / "step_00000004";
  fs::create_directories(dir);
  for (const char* name : {"model.bin.tmp.99", "rank_00001.state.tmp.5", "COMPLETE.tmp.7", "notes.tmp.3", "model.bin"})
    std::ofstream(dir / name) << "x";
  remove_stale_temporaries(dir.string());
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"model.bin", "notes.tmp.3"});
}
