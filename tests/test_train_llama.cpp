// `ringzero train` and friends with the llama family, as separate processes:
//   - llama-tiny on 2 ranks: ddp, zero1 and zero2 (fp32, no accumulation, the same buckets)
//     end on byte-identical model files; zero3 trains too; every run learns;
//   - a resume from step 4 gives steps 5..8 bitwise and the same final model file (untied);
//   - a Llama checkpoint is a Hugging Face directory: `sample` and `export` read it, `train
//     --init` takes it and transformers' fixture; the GPT-2-only readers refuse it in one line;
//   - `verify` against the transformers reference passes, and fails on a wrong tolerance;
//   - `memory --model smollm2-135m` plans SmolLM2-135M's 134,515,008 parameters.
// Every command runs under `timeout` (tests/run_ringzero.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::BinaryRun;
using rz::test::fresh_temp_dir;
using rz::test::quote;
using rz::test::run_ringzero;

namespace {

fs::path work_dir() {
  static const fs::path dir = fresh_temp_dir("rz_test_train_llama_");
  return dir;
}

fs::path fixture(const std::string& sub) {
  return fs::path(RINGZERO_SOURCE_DIR) / "tests/fixtures/hf_llama_tiny" / sub;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Byte-level shards of a small grammar's sentences (vocab 257).
fs::path data_dir() {
  static fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    const char* subj[] = {"the cat", "a dog", "my friend", "the ring", "every rank"};
    const char* verb[] = {"sees", "sends", "reduces", "gathers", "keeps"};
    const char* obj[] = {"the shard.", "a bucket.", "its gradient.", "the model.", "one chunk."};
    uint64_t x = 4242;
    auto pick = [&](int n) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int>((x >> 33) % static_cast<uint64_t>(n));
    };
    for (int f = 0; f < 30; ++f) {  // documents: the validation split takes whole ones
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 50; ++s) out << subj[pick(5)] << " " << verb[pick(5)] << " " << obj[pick(5)] << "\n";
    }
    const fs::path shards = work_dir() / "data";
    BinaryRun r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --val-fraction 0.1 --out " +
                               quote(shards.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return shards;
  }();
  return dir;
}

std::string llama_args(const std::string& extra) {
  const fs::path d = data_dir();
  return "train --model llama-tiny --data " + quote((d / "train_*.bin").string()) + " --val-data " +
         quote((d / "val_*.bin").string()) + " --batch 4 --seq 32 --lr 3e-3 --warmup 2 --bucket-mb 0.05 --threads 1 " +
         extra;
}

void ok(const std::string& args) {
  const BinaryRun r = run_ringzero(args);
  INFO(args << "\n" << r.output);
  REQUIRE(r.status == 0);
}

void refused(const std::string& args, const std::string& what) {
  const BinaryRun r = run_ringzero(args);
  INFO(args << "\n" << r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find(what) != std::string::npos);
}

std::vector<nlohmann::json> metrics(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("llama-tiny on 2 processes: ddp, zero1 and zero2 end on the same bytes; zero3 trains too") {
  std::string reference;
  for (const char* strategy : {"ddp", "zero1", "zero2", "zero3"}) {
    INFO(strategy);
    const fs::path d = work_dir() / (std::string("strat_") + strategy);
    ok(llama_args(std::string("--strategy ") + strategy + " --nproc-per-node 2 --steps 8 --save-dir " +
                  quote((d / "ck").string()) + " --metrics " + quote((d / "m.jsonl").string())));
    const auto m = metrics(d / "m.jsonl");
    REQUIRE(m.size() == 8);
    CHECK(m[7]["loss"].get<double>() < 0.8 * m[0]["loss"].get<double>());
    // The checkpoint's model is a Hugging Face directory (config.json + model.safetensors).
    const fs::path step = d / "ck" / "step_00000008";
    CHECK(!fs::exists(step / "model.bin"));
    const std::string weights = slurp(step / "model.safetensors");
    REQUIRE(!weights.empty());
    CHECK(nlohmann::json::parse(slurp(step / "config.json"))["num_key_value_heads"] == 2);
    if (std::string(strategy) == "ddp") reference = weights;
    else if (std::string(strategy) != "zero3") CHECK(weights == reference);  // zero3 cuts its buckets at units
  }
}

TEST_CASE("llama: resume from step 4 gives steps 5..8 bitwise; the checkpoint is read as a model everywhere") {
  const fs::path d = work_dir() / "resume";
  const std::string common = "--strategy zero2 --classifier untied --nproc-per-node 2 --steps 8 ";
  ok(llama_args(common + "--save-every 4 --save-dir " + quote((d / "a").string()) + " --metrics " +
                quote((d / "a.jsonl").string())));
  fs::create_directories(d / "b");
  fs::copy(d / "a" / "step_00000004", d / "b" / "step_00000004", fs::copy_options::recursive);
  ok(llama_args(common + "--resume --save-dir " + quote((d / "b").string()) + " --metrics " +
                quote((d / "b.jsonl").string())));
  const auto a = metrics(d / "a.jsonl"), b = metrics(d / "b.jsonl");
  REQUIRE(a.size() == 8);
  REQUIRE(b.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(b[i]["loss"].dump() == a[4 + i]["loss"].dump());
  CHECK(slurp(d / "a/step_00000008/model.safetensors") == slurp(d / "b/step_00000008/model.safetensors"));
  // A resume asking for another shape is refused, naming both.
  refused(llama_args(common + "--kv-heads 1 --resume --save-dir " + quote((d / "b").string())),
          "holds a model of shape llama L2 C64 NH4 NKV2");

  // The checkpoint as a model: sample, export to hf: (transformers' layout, read back the
  // same), and --init; the GPT-2-only paths refuse it in one line.
  const fs::path ck = d / "a";
  const BinaryRun s = run_ringzero("sample --model " + quote(ck.string()) + " --tokenizer byte --tokens 8 --temperature 0");
  INFO(s.output);
  CHECK(s.status == 0);
  ok("export --model " + quote(ck.string()) + " --to " + quote("hf:" + (d / "hf").string()));
  CHECK(slurp(d / "hf/model.safetensors") == slurp(ck / "step_00000008/model.safetensors"));
  ok(llama_args("--steps 1 --init " + quote("hf:" + (d / "hf").string())));
  refused(llama_args("--steps 1 --heads 2 --init " + quote((ck / "step_00000008").string())),
          "heads: 2, but the --init model");
  refused("export --model " + quote(ck.string()) + " --to " + quote((d / "x.bin").string()),
          "an llm.c model file, which holds GPT-2 only");
  refused("sample --model " + quote((ck / "step_00000008/model.safetensors").string()) + " --tokens 1",
          "a safetensors file (a Hugging Face model's weights), not an llm.c model file");
}

TEST_CASE("llama: --init from transformers' fixture on 2 ranks; verify against its reference") {
  const fs::path d = work_dir() / "init";
  for (const char* sub : {"tied", "untied"}) {
    INFO(sub);
    ok(llama_args("--steps 2 --strategy zero3 --nproc-per-node 2 --init " + quote("hf:" + fixture(sub).string()) +
                  " --metrics " + quote((d / (std::string(sub) + ".jsonl")).string())));
    // It starts from the fixture's sharp weights, far above a fresh model's ln 257 = 5.55.
    CHECK(metrics(d / (std::string(sub) + ".jsonl"))[0]["loss"].get<double>() > 8.0);
  }
  const std::string verify = "verify --model " + quote("hf:" + fixture("untied").string()) + " --state " +
                             quote(fixture("reference.safetensors").string());
  const BinaryRun v = run_ringzero(verify);
  INFO(v.output);
  CHECK(v.status == 0);
  CHECK(v.output.find("dh0.qkvw") != std::string::npos);
  CHECK(v.output.find("dlmhead") != std::string::npos);
  CHECK(run_ringzero(verify + " --grads-atol 1e-12 --rtol 0").status == 1);
  refused("verify --model " + quote("hf:" + fixture("tied").string()) + " --state " +
              quote(fixture("reference.safetensors").string()),
          "has shape [32, 96], expected [32, 80]");
}

TEST_CASE("memory plans SmolLM2-135M from its preset") {
  const BinaryRun r = run_ringzero("memory --model smollm2-135m --seq 2048 --batch 1 --nranks 8 --strategy zero3 --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["params"].get<double>() == 134515008.0);
  CHECK(j["model"]["family"] == "llama");
  CHECK(j["model"]["kv_heads"] == 3);
  CHECK(j["model"]["intermediate"] == 1536);
  CHECK(j["rows"][0]["total_bytes"].get<double>() > 0);
}
