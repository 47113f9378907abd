// `train --tensorboard DIR` (train/tensorboard.h):
//   - the writer's bytes are PyPI tensorboard's for the same events, byte for byte
//     (tests/fixtures/tensorboard/scalars.tfevents, made by make_fixture.py beside it);
//   - the reader (tests/tfevents_reader.h) decodes what torch's SummaryWriter wrote, and
//     refuses a damaged file at the record that is damaged;
//   - a real 2-rank run writes one file (rank 0's), every record's CRCs check, and every
//     value of every metrics JSONL record is in it at its step, with each rank's peak
//     memory; a resumed run adds a file that opens with a session start at its first step;
//   - a directory that is a file, holds an input or lies in a checkpoint is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/run_ringzero.h"
#include "tests/tfevents_reader.h"
#include "train/tensorboard.h"

namespace fs = std::filesystem;
using namespace rz;
using namespace rz::test;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fixture(const char* name) { return fs::path(RINGZERO_SOURCE_DIR) / "tests/fixtures/tensorboard" / name; }

fs::path work_dir() {
  static const fs::path d = fresh_temp_dir("rz_test_tensorboard_");
  return d;
}

// Byte-tokenized shards of generated text (the tiny preset's vocabulary).
fs::path data_dir() {
  static const fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    uint64_t x = 7;
    for (int f = 0; f < 10; ++f) {
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 60; ++s) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out << "ring " << (x >> 60) << " sends chunk " << ((x >> 40) & 7) << ".\n";
      }
    }
    const fs::path out = work_dir() / "data";
    const BinaryRun r = run_ringzero("prepare --quiet --input " + quote(text.string()) +
                                     " --tokenizer byte --val-fraction 0.2 --out " + quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

std::string train_args(const fs::path& d) {
  const fs::path data = data_dir();
  return "train --model tiny --data " + quote((data / "train_*.bin").string()) + " --val-data " +
         quote((data / "val_*.bin").string()) +
         " --batch 2 --seq 16 --lr 3e-3 --warmup 1 --threads 1 --eval-every 2 --eval-batches 1 --comm-timeout 60"
         " --metrics " + quote((d / "m.jsonl").string()) + " --tensorboard " + quote((d / "tb").string()) +
         " --save-dir " + quote((d / "ck").string());
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Scalars of a file by (step, tag).
std::map<std::pair<int64_t, std::string>, float> scalars(const std::vector<TfEvent>& events) {
  std::map<std::pair<int64_t, std::string>, float> m;
  for (const TfEvent& e : events)
    for (const TfValue& v : e.values) {
      REQUIRE(v.has_simple_value);
      REQUIRE(m.emplace(std::pair{e.step, v.tag}, v.simple_value).second);  // each once
    }
  return m;
}

// Every number of a metrics record, flattened as the writer flattens it.
void flatten(const nlohmann::json& node, const std::string& tag, std::map<std::string, double>& out) {
  if (node.is_number()) out[tag] = node.get<double>();
  else if (node.is_boolean()) out[tag] = node.get<bool>() ? 1.0 : 0.0;
  else if (node.is_object())
    for (const auto& [k, v] : node.items()) flatten(v, tag + "/" + k, out);
}

}  // namespace

TEST_CASE("CRC32C: the standard check value, and TensorBoard's mask", "[train][tensorboard]") {
  REQUIRE(crc32c("123456789", 9) == 0xe3069283u);
  REQUIRE(crc32c("", 0) == 0u);
  const uint32_t c = crc32c("123456789", 9);
  REQUIRE(masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("the writer's bytes are PyPI tensorboard's, byte for byte", "[train][tensorboard]") {
  // The events of make_fixture.py, in its order, with its wall times.
  std::string mine = tfrecord(event_file_version(1765000000.125));
  struct S {
    double wall;
    int64_t step;
    const char* tag;
    float value;
  };
  for (S s : {S{1765000001.5, 1, "loss", 10.9876f}, S{1765000001.5, 1, "lr", 6e-4f}, S{1765000002.25, 0, "val_loss", 5.5f},
              S{1765000003.0, 2, "grad_norm", 0.1f}, S{1765000004.0, 12345678901, "mem_peak_bytes/params", 1.2345e9f},
              S{1765000005.0, 3, "neg", -3.25f}, S{1765000006.0, 300, "mem_peak_mib/rank1", 0.0f}})
    mine += tfrecord(event_scalar(s.wall, s.step, s.tag, s.value));
  mine += tfrecord(event_session_start(1765000007.0, 4));
  const std::string theirs = read(fixture("scalars.tfevents"));
  REQUIRE(theirs.size() == 405);
  REQUIRE(mine.size() == theirs.size());
  REQUIRE(std::memcmp(mine.data(), theirs.data(), theirs.size()) == 0);

  const auto events = read_tfevents(theirs);
  REQUIRE(events.size() == 9);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].wall_time == 1765000000.125);
  CHECK(events[5].step == 12345678901);
  CHECK(events[5].values.at(0).tag == "mem_peak_bytes/params");
  CHECK(events[5].values.at(0).simple_value == 1.2345e9f);
  CHECK(events[7].values.at(0).simple_value == 0.0f);
  CHECK(events[8].step == 4);
  CHECK(events[8].session_status == 1);
}

TEST_CASE("the reader decodes torch's SummaryWriter and refuses a damaged file", "[train][tensorboard]") {
  const std::string bytes = read(fixture("summary_writer.tfevents"));
  const auto events = read_tfevents(bytes);
  REQUIRE(events.at(0).file_version == "brain.Event:2");
  const auto s = scalars(events);
  REQUIRE(s.size() == 6);
  for (int step = 1; step <= 3; ++step) {
    CHECK(s.at({step, "loss"}) == float(4.0 / step));
    CHECK(s.at({step, "lr"}) == float(1e-3 * step));
  }
  // One flipped bit anywhere fails a CRC (or, in a length, the framing); a cut anywhere
  // inside the last record leaves it incomplete.
  for (size_t at = 0; at < bytes.size(); at += 7) {
    std::string bad = bytes;
    bad[at] ^= 0x10;
    CAPTURE(at);
    REQUIRE_THROWS_WITH(read_tfevents(bad), Catch::StartsWith("event record"));
  }
  const size_t last = bytes.size() - (12 + 4 + 20);  // within the last record, whatever its size
  for (size_t cut : {bytes.size() - 1, bytes.size() - 4, last})
    REQUIRE_THROWS_WITH(read_tfevents(bytes.substr(0, cut)), Catch::StartsWith("event record"));
}

TEST_CASE("a 2-rank run: one event file, every metrics value at its step, each rank's memory", "[train][tensorboard]") {
  const fs::path d = work_dir() / "run";
  const BinaryRun r = run_ringzero(train_args(d) + " --steps 4 --nproc-per-node 2", 240);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto files = event_files(d / "tb");
  REQUIRE(files.size() == 1);  // rank 0's only
  const std::string name = files[0].filename().string();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  CHECK(r.output.find("tensorboard: " + files[0].string()) != std::string::npos);
  const auto events = read_tfevents(read(files[0]));
  REQUIRE(events.at(0).file_version == "brain.Event:2");
  const auto tb = scalars(events);

  std::ifstream jsonl(d / "m.jsonl");
  std::string line;
  size_t records = 0, values = 0;
  while (std::getline(jsonl, line)) {
    const auto j = nlohmann::json::parse(line);
    const int64_t step = j.at("step").get<int64_t>();
    std::map<std::string, double> want;
    for (const auto& [k, v] : j.items())
      if (k != "step") flatten(v, k, want);
    for (const auto& [tag, value] : want) {
      CAPTURE(step, tag);
      const auto it = tb.find({step, tag});
      REQUIRE(it != tb.end());
      CHECK(it->second == float(value));
      ++values;
    }
    for (const char* tag : {"mem_peak_mib/rank0", "mem_peak_mib/rank1"}) {
      CAPTURE(step, tag);
      REQUIRE(tb.count({step, tag}) == 1);
      CHECK(tb.at({step, tag}) > 0.0f);
    }
    ++records;
  }
  REQUIRE(records == 4);
  CHECK(tb.count({2, "val_loss"}) == 1);
  CHECK(tb.count({4, "val_loss"}) == 1);
  CHECK(tb.count({1, "val_loss"}) == 0);
  // Nothing but those: the JSONL's values and the two ranks' memory.
  CHECK(tb.size() == values + 2 * records);

  SECTION("a resumed run adds a file that opens with a session start after its checkpoint") {
    const BinaryRun again = run_ringzero(train_args(d) + " --steps 6 --nproc-per-node 2 --resume", 240);
    INFO(again.output);
    REQUIRE(again.status == 0);
    const auto both = event_files(d / "tb");
    REQUIRE(both.size() == 2);
    const fs::path added = both[0] == files[0] ? both[1] : both[0];
    const auto ev = read_tfevents(read(added));
    REQUIRE(ev.size() >= 3);
    CHECK(ev[1].session_status == 1);  // START
    CHECK(ev[1].step == 5);
    const auto s = scalars(ev);
    CHECK(s.count({5, "loss"}) == 1);
    CHECK(s.count({6, "val_loss"}) == 1);
    CHECK(s.count({4, "loss"}) == 0);
  }
}

TEST_CASE("--tensorboard: a file, an input directory or a checkpoint's directory is refused", "[train][tensorboard]") {
  const fs::path d = work_dir() / "refuse";
  fs::create_directories(d);
  std::ofstream(d / "plain") << "x";
  const fs::path data = data_dir();
  const std::string base = "train --model tiny --steps 1 --threads 1 --data " + quote((data / "train_*.bin").string());
  struct Bad {
    std::string flag, error;
  };
  for (const Bad& b : {Bad{"--tensorboard " + quote((d / "plain").string()), "tensorboard: " + (d / "plain").string() +
                                                                                  " exists and is not a directory"},
                       Bad{"--tensorboard " + quote(data.string()), "must not contain the run's inputs"},
                       Bad{"--tensorboard " + quote((d / "ck" / "step_00000001" / "tb").string()) + " --save-dir " +
                               quote((d / "ck").string()),
                           "lies inside a checkpoint directory"},
                       Bad{"--tensorboard " + quote((d / "ck").string()) + " --save-dir " + quote((d / "ck").string()),
                           "is the same file as the save_dir output"}}) {
    const BinaryRun r = run_ringzero(base + " " + b.flag);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find(b.error) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') <= 2);
  }
  CHECK(read(d / "plain") == "x");
}
