// End-to-end tests of `ringzero prepare` (spawns RINGZERO_BINARY under `timeout`): documents
// in input order with EOT, shard splitting, the seeded val draw, fortunes, streaming GPT-2
// encoding across read chunks, meta.json, tokenizer.bin and flag errors.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/test_paths.h"

using namespace rz;
using rz::testing::read_bytes;
using rz::testing::ScratchDir;
using rz::testing::write_bytes;

namespace {

struct RunResult {
  int rc;
  std::string out, err;
};

RunResult run_prepare(const ScratchDir& dir, const std::string& args) {
  std::string cmd = std::string("timeout 120 ") + RINGZERO_BINARY + " prepare " + args + " >" +
                    dir.file("stdout.txt") + " 2>" + dir.file("stderr.txt");
  int st = std::system(cmd.c_str());
  RunResult r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_bytes(dir.file("stdout.txt")),
              read_bytes(dir.file("stderr.txt"))};
  INFO(cmd << "\n" << r.out << r.err);
  REQUIRE(r.rc != 124);  // timed out
  return r;
}

// All tokens of the shards named in meta.json's <split>_shards, in order.
std::vector<int> read_split(const std::string& out, const nlohmann::json& meta, const std::string& split) {
  std::vector<int> all;
  for (const auto& name : meta[split + "_shards"]) {
    ShardReader r(out + "/" + name.get<std::string>());
    all.insert(all.end(), r.tokens(), r.tokens() + r.count());
  }
  return all;
}

nlohmann::json read_meta(const std::string& out) { return nlohmann::json::parse(read_bytes(out + "/meta.json")); }

// Splits a token stream at EOT into documents (each must start with EOT).
std::vector<std::vector<int>> documents(const std::vector<int>& tokens, int eot) {
  std::vector<std::vector<int>> docs;
  for (int t : tokens) {
    if (t == eot) docs.emplace_back();
    else {
      REQUIRE(!docs.empty());
      docs.back().push_back(t);
    }
  }
  return docs;
}

}  // namespace

TEST_CASE("prepare, byte tokenizer, no val: every file is a document, in input order") {
  ScratchDir dir;
  write_bytes(dir.file("b.txt"), "second file\n");
  write_bytes(dir.file("a.txt"), "first");
  write_bytes(dir.file("c.txt"), "third \xFF");
  std::string out = dir.file("out");
  RunResult r = run_prepare(dir, "--input " + dir.file("b.txt") + " " + dir.file("a.txt") + " " +
                                     dir.file("c.txt") + " --out " + out + " --shard-tokens 7 --quiet");
  REQUIRE(r.rc == 0);
  REQUIRE(r.err.empty());

  auto byte = make_byte_tokenizer();
  std::vector<int> expect;
  for (const char* s : {"second file\n", "first", "third \xFF"}) {
    expect.push_back(256);
    for (int t : byte->encode(s)) expect.push_back(t);
  }
  nlohmann::json meta = read_meta(out);
  REQUIRE(meta["tokenizer"] == "byte");
  REQUIRE(meta["vocab_size"] == 257);
  REQUIRE(meta["eot"] == 256);
  REQUIRE(meta["train_tokens"] == expect.size());
  REQUIRE(meta["val_tokens"] == 0);
  REQUIRE(meta["val_shards"].empty());
  REQUIRE(meta["sources"].size() == 3);
  REQUIRE(meta["train_shards"].size() == (expect.size() + 6) / 7);  // 29 tokens -> 5 shards
  REQUIRE(meta["train_shards"][0] == "train_000000.bin");
  REQUIRE(ShardReader(out + "/train_000000.bin").count() == 7);
  REQUIRE(read_split(out, meta, "train") == expect);

  auto tok = load_llmc_tokenizer(out + "/tokenizer.bin");
  REQUIRE(tok->vocab_size() == 257);
  REQUIRE(tok->eot() == 256);

  // A second, smaller run into the same directory leaves no stale shards behind.
  r = run_prepare(dir, "--input " + dir.file("a.txt") + " --out " + out + " --quiet");
  REQUIRE(r.rc == 0);
  REQUIRE(std::filesystem::exists(out + "/train_000000.bin"));
  REQUIRE_FALSE(std::filesystem::exists(out + "/train_000001.bin"));
}

TEST_CASE("prepare --split-fortunes: one document per fortune, a seeded whole-document val split") {
  ScratchDir dir;
  std::string fdir = dir.file("fortunes");
  std::filesystem::create_directory(fdir);
  std::string text;
  std::vector<std::string> fortunes;
  for (int i = 0; i < 60; i++) {
    fortunes.push_back("Fortune number " + std::to_string(i) + ".\n\t-- someone %" + std::to_string(i) + "\n");
    text += fortunes.back() + "%\n";
  }
  write_bytes(fdir + "/wisdom", text);
  write_bytes(fdir + "/wisdom.dat", std::string("\x00\x00\x00\x02\xFF\x01", 6));  // strfile index
  std::filesystem::create_symlink("wisdom", fdir + "/wisdom.u8");
  write_bytes(fdir + "/zen", "Only one\n%\n%\nand another, no trailing percent\n");
  fortunes.push_back("Only one\n");
  fortunes.push_back("and another, no trailing percent\n");

  auto run = [&](const std::string& out, int seed) {
    RunResult r = run_prepare(dir, "--input " + fdir + " --split-fortunes --val-fraction 0.3 --quiet --seed " +
                                       std::to_string(seed) + " --out " + out);
    REQUIRE(r.rc == 0);
    return read_meta(out);
  };
  std::string out = dir.file("out");
  nlohmann::json meta = run(out, 5);
  REQUIRE(meta["sources"].size() == 2);  // wisdom.dat and the wisdom.u8 link are skipped
  REQUIRE(meta["documents"]["train"].get<int>() + meta["documents"]["val"].get<int>() == 62);
  REQUIRE(meta["documents"]["val"].get<int>() > 5);
  REQUIRE(meta["documents"]["train"].get<int>() > 30);
  REQUIRE(meta["documents"]["empty_skipped"] == 1);  // the "%" right after "%"

  auto byte = make_byte_tokenizer();
  auto train = documents(read_split(out, meta, "train"), 256);
  auto val = documents(read_split(out, meta, "val"), 256);
  REQUIRE(train.size() + val.size() == 62);
  // Every fortune is in exactly one split, whole, and each split keeps input order.
  size_t ti = 0, vi = 0;
  for (const std::string& f : fortunes) {
    std::vector<int> ids = byte->encode(f);
    if (ti < train.size() && train[ti] == ids) ti++;
    else {
      REQUIRE(vi < val.size());
      REQUIRE(val[vi] == ids);
      vi++;
    }
  }
  REQUIRE(ti == train.size());
  REQUIRE(vi == val.size());

  // The same seed gives the same split; another seed another one.
  std::string out2 = dir.file("out2");
  run(out2, 5);
  REQUIRE(read_bytes(out + "/val_000000.bin") == read_bytes(out2 + "/val_000000.bin"));
  std::string out3 = dir.file("out3");
  run(out3, 6);
  REQUIRE(read_bytes(out + "/val_000000.bin") != read_bytes(out3 + "/val_000000.bin"));
}

TEST_CASE("prepare --tokenizer gpt2 streams large documents and equals encoding them whole") {
  ScratchDir dir;
  // The tiny vocabulary of test_data_tokenizer: bytes, then ll he hell hello Ġw or Ġwor, EOT.
  auto byte_char = [](int b) {
    int k = 0;
    for (int c = 0; c < 256; c++) {
      bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      uint32_t cp = printable ? c : 0x100 + k++;
      if (c == b) {
        if (cp < 0x80) return std::string(1, static_cast<char>(cp));
        return std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
    return std::string();
  };
  std::string json = "{";
  for (int b = 0; b < 256; b++) {
    std::string c = byte_char(b);
    if (c == "\"" || c == "\\") c = "\\" + c;
    json += "\"" + c + "\": " + std::to_string(b) + ", ";
  }
  std::string sp = byte_char(' ');
  json += "\"ll\": 256, \"he\": 257, \"hell\": 258, \"hello\": 259, \"" + sp + "w\": 260, \"or\": 261, \"" + sp +
          "wor\": 262, \"<|endoftext|>\": 263}";
  std::string gdir = dir.file("gpt2");
  std::filesystem::create_directory(gdir);
  write_bytes(gdir + "/encoder.json", json);
  write_bytes(gdir + "/vocab.bpe", "#version: 0.2\nl l\nh e\nhe ll\nhell o\n" + sp + " w\no r\n" + sp + "w or\n");

  // ~2.5 MB: more than two 1 MiB read chunks, with multi-byte characters and space runs
  // that straddle chunk ends somewhere.
  std::mt19937 rng(3);
  const std::vector<std::string> words = {"hello", " world", "  ", "\n\n", "caf\xC3\xA9", " \xE6\x9D\xB1",
                                          "'ll", " 42", "!!", "hell", "\t"};
  std::string big;
  while (big.size() < 2500000) big += words[rng() % words.size()];
  write_bytes(dir.file("big.txt"), big);
  write_bytes(dir.file("small.txt"), "hello world");

  std::string out = dir.file("out");
  RunResult r = run_prepare(dir, "--input " + dir.file("big.txt") + " " + dir.file("small.txt") +
                                     " --tokenizer gpt2 --gpt2-dir " + gdir + " --out " + out);
  REQUIRE(r.rc == 0);
  REQUIRE(r.out.find("MB/s") != std::string::npos);
  nlohmann::json meta = read_meta(out);
  REQUIRE(meta["tokenizer"] == "gpt2");
  REQUIRE(meta["vocab_size"] == 264);

  auto tok = make_gpt2_tokenizer(gdir);
  std::vector<int> expect = {263};
  for (int t : tok->encode(big)) expect.push_back(t);
  expect.push_back(263);
  expect.push_back(259);
  expect.push_back(262);
  expect.push_back('l');
  expect.push_back('d');
  REQUIRE(read_split(out, meta, "train") == expect);
  REQUIRE(load_llmc_tokenizer(out + "/tokenizer.bin")->decode(expect).size() == big.size() + 11 + 2 * 13);
}

TEST_CASE("prepare reports bad flags and inputs as one line") {
  ScratchDir dir;
  write_bytes(dir.file("a.txt"), "x");
  RunResult r = run_prepare(dir, "--input " + dir.file("missing.txt") + " --out " + dir.file("o"));
  REQUIRE(r.rc == 1);
  REQUIRE_THAT(r.err, Catch::Contains("missing.txt") && Catch::Contains("no such file"));
  REQUIRE(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  r = run_prepare(dir, "--input " + dir.file("a.txt") + " --out " + dir.file("o") + " --val-fraction 1.5");
  REQUIRE(r.rc == 1);
  REQUIRE_THAT(r.err, Catch::Contains("--val-fraction 1.5"));

  r = run_prepare(dir, "--input " + dir.file("a.txt") + " --out " + dir.file("o") + " --tokenizer gpt2 --gpt2-dir " +
                           dir.file("nowhere"));
  REQUIRE(r.rc == 1);
  REQUIRE_THAT(r.err, Catch::Contains("nowhere/encoder.json"));

  r = run_prepare(dir, "--input " + dir.file("a.txt") + " --out " + dir.file("o") + " --no-such-flag");
  REQUIRE(r.rc != 0);

  r = run_prepare(dir, "--help");
  REQUIRE(r.rc == 0);
  REQUIRE_THAT(r.out, Catch::Contains("--split-fortunes") && Catch::Contains("--val-fraction"));
}
