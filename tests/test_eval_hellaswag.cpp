// HellaSwag in llm.c's completion style and bits per byte (data/eval_file.h,
// train/hellaswag.h, train/val_loss.h): the reader against a file llm.c's own write_evalfile
// wrote (tests/fixtures/hellaswag_tiny), the scores against PyTorch's by the same rule on the
// tiny transformers model (tests/fixtures/hf_gpt2_tiny), sharding over ranks, each defect of a
// crafted file refused with one line, and bpb = nats / (ln 2 x bytes).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "data/eval_file.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "model/gpt2.h"
#include "model/hf_gpt2.h"
#include "model/layout.h"
#include "train/hellaswag.h"
#include "train/val_loss.h"
#include "tests/test_paths.h"

using namespace rz;
namespace fs = std::filesystem;

namespace {

fs::path fixtures() { return fs::path(RINGZERO_SOURCE_DIR) / "tests/fixtures"; }
const fs::path kEvalFile = fixtures() / "hellaswag_tiny/hellaswag_tiny.bin";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

nlohmann::json expected() { return nlohmann::json::parse(slurp(fixtures() / "hellaswag_tiny/expected.json")); }

std::unique_ptr<GPT2> tiny_model() {
  const std::string dir = (fixtures() / "hf_gpt2_tiny/fp32").string();
  auto m = std::make_unique<GPT2>(inspect_hf_gpt2(dir).cfg, ModelOptions{Precision::fp32});
  read_hf_gpt2(dir, [&](size_t b, const float* p, size_t n) { m->set_params_f32(b, n, p); });
  return m;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);
    return m;
  }
  return "";
}

std::vector<uint16_t> bytes_of(const std::string& s) { return std::vector<uint16_t>(s.begin(), s.end()); }

}  // namespace

TEST_CASE("eval file: llm.c's write_evalfile output reads as its examples, and our writer writes it byte for byte",
          "[hellaswag]") {
  const EvalFile f = read_eval_file(kEvalFile.string());
  const nlohmann::json e = expected();
  REQUIRE(f.examples.size() == e["scores"].size());
  for (size_t i = 0; i < f.examples.size(); ++i) {
    const EvalExample& x = f.examples[i];
    const nlohmann::json& s = e["scores"][i];
    INFO("example " << i);
    CHECK(x.index == static_cast<int>(i));
    CHECK(x.label == s["label"].get<int>());
    CHECK(x.context == bytes_of(s["context"].get<std::string>()));  // byte tokens
    REQUIRE(x.completions.size() == 4);
    for (size_t c = 0; c < 4; ++c) CHECK(x.completions[c] == bytes_of(s["endings_text"][c].get<std::string>()));
  }
  CHECK(f.longest_row() <= 64);
  const fs::path out = fs::temp_directory_path() / ("rz_evalfile_" + std::to_string(::getpid()) + ".bin");
  write_eval_file(out.string(), f.examples);
  CHECK(slurp(out) == slurp(kEvalFile));
  fs::remove(out);
}

TEST_CASE("hellaswag: ringzero's scores are PyTorch's on the tiny transformers model, on 1 rank and sharded",
          "[hellaswag]") {
  const EvalFile f = read_eval_file(kEvalFile.string());
  const nlohmann::json e = expected();
  auto model = tiny_model();
  check_eval_fits(f, model->config(), 0, kEvalFile.string(), "maxT");
  for (int rows : {1, 4, 16, 100}) {  // one ending per forward (raised to one example), one example, several, all
    INFO("rows " << rows);
    std::vector<ExampleScore> scores;
    ChoiceEvalOptions o;
    o.rows = rows;
    const ChoiceCounts c = score_choices(*model, f, o, &scores);
    REQUIRE(scores.size() == f.examples.size());
    for (size_t i = 0; i < scores.size(); ++i) {
      const nlohmann::json& s = e["scores"][i];
      INFO("example " << i);
      CHECK(scores[i].pred_sum == s["pred_sum"].get<int>());
      CHECK(scores[i].pred_mean == s["pred_mean"].get<int>());
      for (size_t k = 0; k < 4; ++k) {
        const double ref = s["endings"][k]["loss_sum"].get<double>();
        CHECK(scores[i].completions[k].tokens == s["endings"][k]["tokens"].get<int>());
        // fp32 losses summed in another order: tests/gpu_compare.h's fp32 rtol, and an atol of
        // 1e-5 x the sum's magnitude's scale (some 60 nats).
        CHECK(std::fabs(scores[i].completions[k].loss_sum - ref) <= 1e-5 * std::fabs(ref) + 1e-4);
      }
    }
    CHECK(c.examples == 10);
    CHECK(c.acc() == e["acc"].get<double>());
    CHECK(c.acc_norm() == e["acc_norm"].get<double>());
  }
  // Three ranks, each scoring its own examples (r, r + 3, ...), add up to the whole.
  ChoiceCounts sum;
  std::vector<int> seen;
  for (int r = 0; r < 3; ++r) {
    std::vector<ExampleScore> scores;
    ChoiceEvalOptions o;
    o.rank = r;
    o.world = 3;
    o.rows = 4;
    const ChoiceCounts c = score_choices(*model, f, o, &scores);
    for (const ExampleScore& s : scores) {
      CHECK(s.index % 3 == r);
      seen.push_back(s.index);
    }
    sum.examples += c.examples;
    sum.correct += c.correct;
    sum.correct_norm += c.correct_norm;
  }
  CHECK(seen.size() == 10);
  CHECK(sum.acc() == e["acc"].get<double>());
  CHECK(sum.acc_norm() == e["acc_norm"].get<double>());
  // --limit: the first N examples only.
  ChoiceEvalOptions lim;
  lim.limit = 4;
  CHECK(score_choices(*model, f, lim).examples == 4);
}

TEST_CASE("eval file: every defect of a crafted file is refused with one line naming the file and the example",
          "[hellaswag]") {
  const std::string good = slurp(kEvalFile);
  const fs::path p = fs::temp_directory_path() / ("rz_bad_eval_" + std::to_string(::getpid()) + ".bin");
  auto word = [](std::string& b, size_t byte_at, uint16_t v) { std::memcpy(&b[byte_at], &v, 2); };
  auto header = [](std::string& b, int i, int32_t v) { std::memcpy(&b[4 * i], &v, 4); };
  // Byte offsets in the good file: example 0 starts at 1024; its fields are words 0..5 there.
  uint16_t ex0_bytes;
  std::memcpy(&ex0_bytes, &good[1026], 2);
  const size_t ex1 = 1024 + ex0_bytes;
  struct Case {
    std::function<void(std::string&)> damage;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](std::string& b) { b.resize(1000); }, "shorter than the 1024-byte header"},
      {[&](std::string& b) { header(b, 0, 20240520); }, "magic 20240520, expected 20240522"},
      {[&](std::string& b) { header(b, 1, 2); }, "version 2, expected 1"},
      {[&](std::string& b) { header(b, 2, 1 << 30); }, "header says 1073741824 examples"},
      {[&](std::string& b) { header(b, 2, 0); }, "header says 0 examples"},
      {[&](std::string& b) { header(b, 3, 4); }, "header's longest example is 4 bytes, but the longest is"},
      {[&](std::string& b) { header(b, 3, 70000); }, "longest example 70000 bytes"},
      {[](std::string& b) { b.push_back('x'); }, "not a whole number of uint16"},
      {[](std::string& b) { b += std::string(2, '\0'); }, "2 bytes after its 10 examples"},
      {[&](std::string& b) { header(b, 2, 11); b += std::string(6, '\xff'); }, "example 10: size 65535 bytes, expected an even number"},
      {[&](std::string& b) { word(b, ex1, 1); }, "example 1: found 1 where the start-of-example mark 65535 should be"},
      {[&](std::string& b) { word(b, ex1 + 4, 7); }, "example 1: index 7, expected 1"},
      {[&](std::string& b) { word(b, 1024 + 6, 4); }, "example 0: label 4, but it has 4 completions"},
      {[&](std::string& b) { word(b, 1024 + 8, 17); }, "example 0: 17 completions, expected 1..16"},
      {[&](std::string& b) { word(b, 1024 + 10, 0); }, "example 0: context has no tokens"},
      {[&](std::string& b) { word(b, 1024 + 10, 5000); }, "example 0: context has 5000 tokens, but only"},
      {[&](std::string& b) { word(b, 1024 + 12, 65535); }, "example 0: context holds 65535"},
      {[&](std::string& b) { word(b, 1024 + 2, 9); }, "example 0: size 9 bytes, expected an even number"},
      {[&](std::string& b) { word(b, 1024 + 2, 65534); }, "example 0: 65534 bytes, but only"},
      {[&](std::string& b) { word(b, 1024 + 2, static_cast<uint16_t>(ex0_bytes - 2)); }, "example 0: completion 3 has"},
      {[&](std::string& b) { word(b, 1024 + 2, static_cast<uint16_t>(ex0_bytes + 2)); }, "example 0: 2 bytes are left after its last completion"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string b = good;
    cases[i].damage(b);
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
    const std::string e = error_of([&] { read_eval_file(p.string()); });
    INFO("case " << i << ": " << e);
    CHECK(e.find(cases[i].expect) != std::string::npos);
    CHECK(e.find(p.string()) != std::string::npos);
  }
  fs::remove(p);
  // A model the examples do not fit: a token outside its vocabulary, a row longer than maxT.
  const EvalFile f = read_eval_file(kEvalFile.string());
  GPT2Config small = model_preset("tiny");
  small.vocab_size = 100;
  finalize_config(small);
  CHECK(error_of([&] { check_eval_fits(f, small, 0, "F", "maxT"); }).find("outside the model's vocabulary of 100") !=
        std::string::npos);
  CHECK(error_of([&] { check_eval_fits(f, model_preset("tiny"), 32, "F", "seq"); }).find("more than seq 32") !=
        std::string::npos);
  CHECK(error_of([&] { read_eval_file(fs::temp_directory_path().string()); }).find("not a regular file") !=
        std::string::npos);
}

TEST_CASE("bits per byte: the losses of targets with bytes over ln 2 x their bytes; end of text counts none",
          "[bpb]") {
  // Token bytes: the byte tokenizer's are 1 (256, end of text, 0); GPT-2's as their text.
  auto byte = make_byte_tokenizer();
  const std::vector<int> bl = token_byte_lengths(*byte, 260);
  CHECK(bl[0] == 1);
  CHECK(bl[255] == 1);
  CHECK(bl[256] == 0);
  CHECK(bl[259] == 0);  // beyond the tokenizer's vocabulary
  auto gpt2 = make_gpt2_tokenizer((fs::path(RINGZERO_SOURCE_DIR) / "data/gpt2").string());
  const std::vector<int> gl = token_byte_lengths(*gpt2, 50304);
  CHECK(gl[50256] == 0);
  const std::vector<int> hello = gpt2->encode(" hello");
  REQUIRE(hello.size() == 1);
  CHECK(gl[static_cast<size_t>(hello[0])] == 6);
  CHECK(gl[50300] == 0);

  // A validation shard of the tiny model's bytes with end-of-text tokens in it.
  const fs::path dir = fs::temp_directory_path() / ("rz_bpb_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<int> toks;
  for (int i = 0; i < 4 * 33 * 2; ++i) toks.push_back(i % 17 == 0 ? 256 : 'a' + (i * 7) % 26);
  write_shard((dir / "val_000000.bin").string(), toks.data(), toks.size());
  auto model = tiny_model();
  DataLoader val((dir / "val_*.bin").string(), 4, 32, 0, 1, 0, false);
  std::vector<int> in, tg;
  const ValSums s = sum_val_batches(*model, val, 4, 32, 2, &bl, in, tg);
  // The same by hand: the last batch's targets and losses.
  double nats = 0, bytes = 0;
  const std::vector<float>& losses = model->position_losses();
  for (size_t p = 0; p < tg.size(); ++p)
    if (tg[p] != 256) {
      nats += losses[p];
      bytes += 1;
    }
  CHECK(s.batches == 2);
  CHECK(s.bytes > bytes);  // two batches' worth
  CHECK(s.bytes < 2 * 4 * 32);  // the end-of-text targets left out
  DataLoader again((dir / "val_*.bin").string(), 4, 32, 0, 1, 0, false);
  const ValSums one = sum_val_batches(*model, again, 4, 32, 1, &bl, in, tg);
  const ValSums two = sum_val_batches(*model, again, 4, 32, 1, &bl, in, tg);
  CHECK(std::fabs(two.nats - nats) <= 1e-9 * nats);
  CHECK(two.bytes == bytes);
  CHECK(std::fabs(one.nats + two.nats - s.nats) <= 1e-9 * s.nats);
  CHECK(*bits_per_byte(s.nats, s.bytes) == s.nats / (std::log(2.0) * s.bytes));
  CHECK_FALSE(bits_per_byte(1.0, 0.0).has_value());
  // Without token bytes, no bpb: nothing is counted.
  DataLoader third((dir / "val_*.bin").string(), 4, 32, 0, 1, 0, false);
  const ValSums none = sum_val_batches(*model, third, 4, 32, 1, nullptr, in, tg);
  CHECK(none.bytes == 0);
  CHECK(none.loss_sum == one.loss_sum);
  fs::remove_all(dir);
}
