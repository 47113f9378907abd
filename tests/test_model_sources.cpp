// Model sources and the commands that take them, through the real binary: `export` round trips
// (hf: -> .bin -> hf:, bitwise), `sample` from every kind of source gives transformers' own
// greedy tokens, `train --init hf:DIR` on 2 ranks with zero2 and its checkpoint exported and
// read back, `eval` (HellaSwag on 1 and 3 ranks, val bits per byte), the in-loop
// --hellaswag, and the refusals, each one line.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/hostile_util.h"

using namespace rz::test;
using namespace rz::test::hostile;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const std::string& sub) { return fs::path(RINGZERO_SOURCE_DIR) / "tests/fixtures" / sub; }
std::string hf(const fs::path& dir) { return quote("hf:" + dir.string()); }

Result ok(const std::string& args) {
  Result r = run(args);
  INFO(args << "\n" << r.output);
  REQUIRE(r.status == 0);
  return r;
}

void refused(const std::string& args, const std::string& expect) {
  Result r = run(args);
  INFO(args << "\n" << r.output);
  CHECK(r.status == 1);
  CHECK(last_line(r.output).find(expect) != std::string::npos);
  CHECK(r.output.find('\n') == r.output.size() - 1);  // one line
}

}  // namespace

TEST_CASE("export: hf -> hf -> .bin -> hf is bitwise; sample gives transformers' greedy tokens from each source") {
  const fs::path w = work_dir() / "export";
  fs::remove_all(w);
  fs::create_directories(w);
  ok("export --model " + hf(fixture("hf_gpt2_tiny/fp32")) + " --to " + hf(w / "a"));
  ok("export --model " + hf(w / "a") + " --to " + quote((w / "a.bin").string()));
  ok("export --model " + quote((w / "a.bin").string()) + " --to " + hf(w / "b"));
  CHECK(slurp(w / "a/model.safetensors") == slurp(w / "b/model.safetensors"));
  CHECK(slurp(w / "a/config.json") == slurp(w / "b/config.json"));
  // bf16 out of bf16 in: the same values.
  ok("export --model " + hf(fixture("hf_gpt2_tiny/bf16")) + " --to " + hf(w / "c") + " --dtype bf16");
  ok("export --model " + hf(w / "c") + " --to " + quote((w / "c.bin").string()) + " --dtype bf16");
  ok("export --model " + quote((w / "c.bin").string()) + " --to " + hf(w / "d") + " --dtype bf16");
  CHECK(slurp(w / "c/model.safetensors") == slurp(w / "d/model.safetensors"));

  // Greedy decoding from the fixture's prompt: transformers' generate() tokens (tokens.json),
  // from the hf: directory, the sharded fp16 one's fp32 export, and the llm.c file.
  const nlohmann::json t = nlohmann::json::parse(slurp(fixture("hf_gpt2_tiny/tokens.json")));
  std::string prompt, want;
  for (int x : t["tokens"]) prompt += static_cast<char>(x);
  for (int x : t["greedy"]) want += static_cast<char>(x);
  for (const std::string& src : {hf(fixture("hf_gpt2_tiny/fp32")), quote((w / "a.bin").string()), hf(w / "b")}) {
    Result r = ok("sample --model " + src + " --prompt " + quote(prompt) + " --temperature 0 --tokens 24");
    CHECK(r.output == prompt + want + "\n");
  }
}

TEST_CASE("export and the model sources refuse, in one line, what would lose or misread something") {
  const fs::path w = work_dir() / "export_refusals";
  fs::remove_all(w);
  fs::create_directories(w);
  const std::string src = hf(fixture("hf_gpt2_tiny/fp32"));
  ok("export --model " + src + " --to " + hf(w / "a"));
  ok("export --model " + src + " --to " + quote((w / "a.bin").string()));
  refused("export --model " + src + " --to " + hf(w / "a"), "exists and is not empty (--overwrite replaces");
  refused("export --model " + src + " --to " + quote((w / "a.bin").string()), "exists (--overwrite replaces it)");
  refused("export --model " + hf(w / "a") + " --to " + hf(w / "a") + " --overwrite", "an input directory; write it elsewhere");
  refused("export --model " + quote((w / "a.bin").string()) + " --to " + quote((w / "a.bin").string()) + " --overwrite",
          "an output never replaces an input");
  refused("export --model " + src + " --to " + hf(w / "e") + " --dtype fp16", "--dtype: expected fp32 or bf16, found 'fp16'");
  refused("export --model hf: --to " + hf(w / "e"), "expected hf:DIR");
  refused("export --model " + quote("hf:" + (w / "nothing").string()) + " --to " + hf(w / "e"), "cannot open");
  refused("export --model " + quote(w.string()) + " --to " + hf(work_dir() / "elsewhere"),
          "a directory with neither model.bin nor a complete checkpoint");
  refused("sample --model " + quote((w / "a").string()) + " --tokens 1", "for a Hugging Face directory write hf:");
  // A checkpoint whose model.bin no longer matches its manifest.
  const fs::path ck = w / "ck";
  ok(tiny_args("--steps 1 --save-dir " + quote(ck.string())));
  {
    std::fstream f(ck / "step_00000001/model.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x7f');
  }
  refused("export --model " + quote(ck.string()) + " --to " + quote((w / "ck.bin").string()), "the checkpoint is damaged");
}

TEST_CASE("train --init hf:DIR on 2 ranks with zero2, its checkpoint exported to hf: and read back, and as --init") {
  const fs::path w = work_dir() / "finetune";
  fs::remove_all(w);
  fs::create_directories(w);
  const fs::path ck = w / "ck";
  ok(tiny_args("--steps 3 --strategy zero2 --nproc-per-node 2 --init " + hf(fixture("hf_gpt2_tiny/fp32")) +
               " --save-dir " + quote(ck.string()) + " --metrics " + quote((w / "m.jsonl").string())));
  // The fine-tuned model: the save_dir (its newest checkpoint) to hf:, and back to an llm.c
  // file, which is the checkpoint's own model.bin byte for byte.
  ok("export --model " + quote(ck.string()) + " --to " + hf(w / "out"));
  ok("export --model " + hf(w / "out") + " --to " + quote((w / "out.bin").string()));
  CHECK(slurp(w / "out.bin") == slurp(ck / "step_00000003/model.bin"));
  // It starts from the HF model's loss, not a fresh model's (ln 257 = 5.55 at init): the
  // fixture's random weights are far from uniform, so their loss is well above.
  std::ifstream m(w / "m.jsonl");
  std::string first;
  std::getline(m, first);
  CHECK(nlohmann::json::parse(first)["loss"].get<double>() > 6.0);
  // A checkpoint directory and the exported hf: directory as --init.
  ok(tiny_args("--steps 1 --init " + quote((ck / "step_00000003").string())));
  ok(tiny_args("--steps 1 --init " + hf(w / "out")));
  refused(tiny_args("--steps 1 --init " + quote("hf:" + (w / "missing").string())), "cannot open");
  refused(tiny_args("--steps 1 --layers 3 --init " + hf(w / "out")), "layers: 3, but the --init model");
}

TEST_CASE("eval: HellaSwag on 1 and 3 ranks gives PyTorch's acc and acc_norm; val loss in bits per byte") {
  const nlohmann::json e = nlohmann::json::parse(slurp(fixture("hellaswag_tiny/expected.json")));
  const std::string model = hf(fixture("hf_gpt2_tiny/fp32"));
  const std::string file = quote(fixture("hellaswag_tiny/hellaswag_tiny.bin").string());
  // 1 and 3 CPU ranks, and the simulated device (the GPU code path's copies, on the CPU).
  for (const char* ranks : {"1", "3", "1 --device sim"}) {
    Result r = ok("eval --json --model " + model + " --hellaswag " + file + " --batch 4 --nproc-per-node " + ranks);
    const nlohmann::json j = nlohmann::json::parse(last_line(r.output));
    CHECK(j["ranks"].get<int>() == ranks[0] - '0');
    CHECK(j["hellaswag"]["examples"].get<int>() == 10);
    CHECK(j["hellaswag"]["acc"].get<double>() == e["acc"].get<double>());
    CHECK(j["hellaswag"]["acc_norm"].get<double>() == e["acc_norm"].get<double>());
  }
  // bpb with the byte tokenizer (prepare's tokenizer.bin beside the shards): loss / ln 2,
  // the validation text having no end-of-text token.
  const fs::path d = data_dir();
  Result v = ok("eval --json --model " + model + " --val-data " + quote((d / "val_*.bin").string()) +
                " --batch 2 --seq 32 --batches 2");
  const nlohmann::json j = nlohmann::json::parse(last_line(v.output));
  CHECK(j["val"]["bpb"].get<double>() == Approx(j["val"]["loss"].get<double>() / std::log(2.0)).epsilon(1e-6));
  refused("eval --model " + model, "nothing to evaluate");
  refused("eval --model " + model + " --hellaswag " + quote(fixture("hf_gpt2_tiny/tokens.json").string()),
          "shorter than the 1024-byte header");
  refused("eval --model " + model + " --hellaswag " + file + " --seq 8", "--seq: does nothing without --val-data");
}

TEST_CASE("train --hellaswag: acc and acc_norm in the progress line and the metrics, equal over 1 and 3 ranks") {
  const std::string file = quote(fixture("hellaswag_tiny/hellaswag_tiny.bin").string());
  const fs::path d = data_dir();
  // zero3 on 3 ranks: its forward gathers parameters, and rank 0 has one forward more (4, 3
  // and 3 examples): the others run an empty one beside it.
  for (const char* setup : {"", "--strategy zero3 --nproc-per-node 3 "}) {
    const fs::path m = work_dir() / (std::string("hs") + (*setup ? "2" : "1") + ".jsonl");
    // A learning rate of 1e-9: the model stays the fixture's (its choices lead by 1e-3 nats).
    Result r = ok(tiny_args(std::string(setup) + "--seq 64 --steps 2 --lr 1e-9 --init " + hf(fixture("hf_gpt2_tiny/fp32")) +
                            " --hellaswag " + file + " --hellaswag-every 1 --val-data " +
                            quote((d / "val_*.bin").string()) + " --eval-every 2 --metrics " + quote(m.string())));
    CHECK(r.output.find("hellaswag acc_norm 0.6000 acc 0.4000 (10)") != std::string::npos);
    CHECK(r.output.find(" bpb) | hellaswag") != std::string::npos);
    std::ifstream in(m);
    std::string line;
    std::getline(in, line);
    const nlohmann::json j = nlohmann::json::parse(line);
    CHECK(j["hellaswag_acc_norm"].get<double>() == 0.6);
    CHECK(j["hellaswag_examples"].get<int>() == 10);
    std::getline(in, line);
    CHECK(nlohmann::json::parse(line).contains("val_bpb"));
  }
}
