// The checkpoint container: round trip, re-assembly from shards, and every kind of damage
// gives a one-line error naming the file.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/check.h"
#include "base/file.h"
#include "model/layout.h"
#include "model/llmc_file.h"
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

// The smallest GPT-2 the model file can describe (L1 C4 NH1 V1 maxT2): the checkpoints' model.bin
// must be a real one, since load_checkpoint checks its size against its header and its
// parameter count against the layout (issue 40). kTotal = its parameters.
GPT2Config tiny_shape() {
  GPT2Config c;
  c.num_layers = 1;
  c.channels = 4;
  c.num_heads = 1;
  c.vocab_size = 1;
  c.max_seq_len = 2;
  finalize_config(c);
  return c;
}
const uint64_t kTotal = num_parameters(tiny_shape());
const uint64_t kHalf = kTotal / 2;

// Rank r of 2 owns [r*kHalf, (r+1)*kHalf) of the layout; value = element index (+100 for m,
// +200 for v).
RankState shard_state(int r) {
  RankState s;
  s.rank = r;
  s.world = 2;
  s.step = 7;
  s.optimizer_step = 7;
  s.layout_total = kTotal;
  s.ranges = {{r * kHalf, r == 0 ? kHalf : kTotal}};
  for (uint64_t i = s.ranges[0].first; i < s.ranges[0].second; ++i) {
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
  const std::vector<float> params(kTotal, 0.5f);
  write_model_file((dir / "model.bin").string(), tiny_shape(), Precision::fp32, params.data());
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
  LoadedCheckpoint ck = load_checkpoint(dir.string(), kTotal);
  CHECK(ck.step == 7);
  CHECK(ck.manifest.world == 2);
  CHECK(ck.manifest.strategy == "zero2");
  REQUIRE(ck.ranks.size() == 2);
  CHECK(ck.ranks[1].loader_next_window == 41);
  CHECK(ck.ranks[1].master.empty());  // the arrays stay in the files until read
  // Read back as a new rank that needs master values for [o+2, o+9) and owns m, v of
  // [o+3, o+4) and [o+6, o+8), with 2-float chunks, where o + 5 = kHalf is where rank 1's file
  // starts: each chunk read from the file that holds it.
  const uint64_t o = kHalf - 5;
  std::vector<float> got[3] = {std::vector<float>(kTotal, -1.0f), std::vector<float>(kTotal, -1.0f),
                               std::vector<float>(kTotal, -1.0f)};
  std::vector<std::pair<int, uint64_t>> chunks;
  StateTarget target;
  target.master_ranges = {{o + 2, o + 9}};
  target.moment_ranges = {{o + 6, o + 8}, {o + 3, o + 4}};
  target.chunk_elems = 2;
  target.put = [&](int array, uint64_t begin, const float* data, size_t n) {
    CHECK(n <= 2);
    chunks.emplace_back(array, begin);
    for (size_t i = 0; i < n; ++i) got[array][begin + i] = data[i];
  };
  read_checkpoint_state(ck, target);
  for (uint64_t i = 0; i < 10; ++i) {
    const float x = static_cast<float>(o + i);
    CHECK(got[kStateMaster][o + i] == (i >= 2 && i < 9 ? x : -1.0f));
    const bool moment = i == 3 || i == 6 || i == 7;
    CHECK(got[kStateM][o + i] == (moment ? 100.0f + x : -1.0f));
    CHECK(got[kStateV][o + i] == (moment ? 200.0f + x : -1.0f));
  }
  // rank 0's file [0, o+5): master [o+2, o+4) [o+4, o+5); rank 1's [o+5, kTotal): [o+5, o+7) [o+7, o+9).
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
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }) == r1 + ": checksum mismatch (the file is corrupted)");
  }
  SECTION("truncated rank file") {
    fs::resize_file(r1, fs::file_size(r1) - 4);
    CHECK(error_of([&] { read_rank_state(r1); }).find(r1 + ": truncated or corrupted rank state") == 0);
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }).find(r1 + ": truncated") == 0);
    fs::resize_file(r1, 20);
    CHECK(error_of([&] { read_rank_state(r1); }).find(r1 + ": truncated rank state") == 0);
  }
  SECTION("a header that claims a giant size is refused before allocating") {
    flip_byte(r1, 8 * 8 + 5);  // nfloats
    CHECK(error_of([&] { read_rank_state(r1); }).find(r1 + ": truncated or corrupted") == 0);
  }
  SECTION("corrupted model file") {
    flip_byte(model, 3);
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }) == model + ": checksum mismatch (the file is corrupted)");
  }
  SECTION("truncated model file") {
    fs::resize_file(model, 4);
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }).find(model + ": truncated") == 0);
  }
  SECTION("a truncated model.bin whose manifest was rewritten to agree (issue 40)") {
    fs::resize_file(model, fs::file_size(model) - 64);
    write_manifest(dir.string(), 7, 2, "zero2", "fp32");  // sizes and checksums of the files as they are now
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }).find("model file " + model + ": ") == 0);
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }).find("but its header") != std::string::npos);
  }
  SECTION("a model.bin that is a FIFO, a state file that links to /dev/zero: named, never opened (issue 40)") {
    fs::remove(model);
    REQUIRE(::mkfifo(model.c_str(), 0644) == 0);
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }) == model + ": is a FIFO, not a regular file a save wrote");
    fs::remove(model);
    const std::vector<float> params(kTotal, 0.5f);
    write_model_file(model, tiny_shape(), Precision::fp32, params.data());
    fs::remove(r1);
    fs::create_symlink("/dev/zero", r1);
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }) ==
          r1 + ": is a symbolic link, not a regular file a save wrote");
  }
  SECTION("a model of another size") {
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal + 2); })
              .find(strfmt("written for a model with %llu parameters, this model has %llu",
                           static_cast<unsigned long long>(kTotal), static_cast<unsigned long long>(kTotal + 2))) !=
          std::string::npos);
  }
  SECTION("malformed manifest") {
    std::ofstream((dir / "COMPLETE").string()) << "{ not json";
    CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }).find((dir / "COMPLETE").string() + ": malformed checkpoint manifest") == 0);
  }
  SECTION("a manifest whose integers are huge floats or negative (found by fuzzing)") {
    const std::string complete = (dir / "COMPLETE").string();
    for (const char* step : {"4e99", "-3", "1.5"}) {
      std::ofstream(complete) << "{\"format\":\"ringzero-checkpoint\",\"step\":" << step
                              << ",\"world\":1,\"strategy\":\"ddp\",\"precision\":\"fp32\",\"files\":{}}";
      CHECK(error_of([&] { load_checkpoint(dir.string(), kTotal); }) ==
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
