// tests/test_train_cuda.cpp: `ringzero train --device cuda` end to end, the user's path
// through the CUDA backend: ddp and zero2, fp32 and bf16, one rank and two ranks sharing
// GPU 0 (the ring's cuda transport between them), a few steps of the tiny model, each step's
// loss within the precision's tolerance of the same job on CPU ranks; then a save, a
// resume that continues the same loss curve bitwise, and `sample` from the checkpoint, the
// GPU's greedy text the CPU's.
// On a GPU it is the device check's end-to-end case (scripts/device-check.sh); in every CI
// run it runs as test_train_cuda_cuemu, where ringzero-cuemu has the CUDA-on-CPU emulator
// behind --device cuda (tests/cuemu: emulated IPC between the rank processes). Without a
// CUDA backend or a GPU it exits 77 (CTest: skipped).
#include <catch2/catch.hpp>

#include "tests/catch_runner.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "comm/transport/device_ring.h"
#include "gpu_compare.h"
#include "gpu_procs.h"
#include "run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::quote;
using rz::test::run_ringzero;

namespace {

fs::path work_dir() {
  static const fs::path dir = rz::test::fresh_temp_dir("rz_test_train_cuda_");
  return dir;
}

// Byte-level shards of a corpus from a fixed LCG (20 documents of 300 words).
fs::path data_dir() {
  static const fs::path out = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    const char* words[] = {"the ring ", "sends ", "a shard ", "to its right neighbour. ", "every rank ", "reduces "};
    uint64_t x = 4242;
    for (int f = 0; f < 20; ++f) {
      std::ofstream o(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 300; ++s) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        o << words[(x >> 33) % 6];
      }
    }
    const fs::path d = work_dir() / "data";
    const auto r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --val-fraction 0.1 --out " +
                                quote(d.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return d;
  }();
  return out;
}

// `train` of the tiny model; its output, and every step's metrics.
struct Run {
  std::string output;
  std::vector<rz::test::StepMetrics> steps;
};
Run train(const std::string& tag, const std::string& args) {
  const fs::path d = work_dir() / tag;
  fs::create_directories(d);
  const std::string cmd = "train --model tiny --data " + quote((data_dir() / "train_*.bin").string()) +
                          " --batch 4 --seq 32 --lr 3e-3 --warmup 1 --threads 1 --comm-timeout 60 --metrics " +
                          quote((d / "m.jsonl").string()) + " " + args;
  const auto r = run_ringzero(cmd, 240);
  INFO(cmd << "\n" << r.output);
  REQUIRE(r.status == 0);
  return Run{r.output, rz::test::read_step_metrics((d / "m.jsonl").string())};
}

}  // namespace

TEST_CASE("train --device cuda matches CPU ranks: ddp and zero2, fp32 and bf16, 1 and 2 ranks", "[slow]") {
  for (const char* prec : {"fp32", "bf16"})
    for (int ranks : {1, 2}) {
      // fp32: the same arithmetic in another order; bf16: both round activations and
      // gradients, in different places (tests/gpu_compare.h's rule: every step's loss and
      // step 1's grad norm within the bound).
      const double rel = std::string(prec) == "fp32" ? 1e-3 : 3e-2;
      const std::string common = std::string("--steps 4 --precision ") + prec + " --nproc-per-node " +
                                 std::to_string(ranks) + " --comm ring --bucket-mb 0.05";
      const std::string tag = std::string(prec) + "_" + std::to_string(ranks);
      const Run cpu = train("cpu_" + tag, common + " --device cpu --strategy ddp");
      REQUIRE(cpu.steps.size() == 4);
      for (const char* strategy : {"ddp", "zero2"}) {
        const Run gpu = train(std::string("cuda_") + strategy + "_" + tag,
                              common + " --device cuda:0 --strategy " + strategy);
        const std::string why = rz::test::compare_step_metrics(gpu.steps, cpu.steps, rel);
        INFO(prec << ", " << ranks << " rank(s), " << strategy << " on cuda vs ddp on cpu: " << why);
        CHECK(why.empty());
      }
    }
}

TEST_CASE("on cuda: a save, a resume that continues the loss curve bitwise, sample as the CPU samples", "[slow]") {
  // 5 steps with checkpoints at 3 and 5; then from a copy of step 3, steps 4 and 5 again.
  const std::string common = "--precision fp32 --device cuda:0 --strategy zero2 --nproc-per-node 2 --comm ring --steps 5";
  const fs::path ck = work_dir() / "ck", again = work_dir() / "ck_again";
  const Run straight = train("straight", common + " --save-every 3 --save-dir " + quote(ck.string()));
  fs::create_directories(again);
  fs::copy(ck / "step_00000003", again / "step_00000003", fs::copy_options::recursive);
  const Run resumed = train("resumed", common + " --resume --save-dir " + quote(again.string()));
  INFO(resumed.output);
  CHECK(resumed.output.find("resumed from") != std::string::npos);
  REQUIRE(straight.steps.size() == 5);
  REQUIRE(resumed.steps.size() == 2);
  for (int s = 0; s < 2; ++s) {
    const rz::test::StepMetrics &got = resumed.steps[s], &want = straight.steps[3 + s];
    INFO("step " << got.step << ": loss " << got.loss << " vs " << want.loss);
    CHECK(got.step == want.step);
    CHECK(got.loss == want.loss);  // bitwise: the GPU's steps are deterministic
    CHECK(got.grad_norm == want.grad_norm);
  }
  auto bytes = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string final_model = bytes(ck / "step_00000005" / "model.bin");
  CHECK(!final_model.empty());
  CHECK(bytes(again / "step_00000005" / "model.bin") == final_model);

  // Greedy sampling from the checkpoint: the GPU's tokens are the CPU's (a prompt of odd
  // length: every forward has an odd T, so the GEMMs' operands sit off the 16-byte grid).
  const fs::path model = ck / "step_00000005";
  const std::string args = "sample --model " + quote(model.string()) +
                           " --tokenizer byte --prompt 'the ring sends' --tokens 24 --temperature 0 --precision fp32";
  const auto gpu = run_ringzero(args + " --device cuda:0", 120), cpu = run_ringzero(args + " --device cpu", 120);
  INFO("cuda:\n" << gpu.output << "\ncpu:\n" << cpu.output);
  REQUIRE(gpu.status == 0);
  REQUIRE(cpu.status == 0);
  auto text = [](const std::string& out) { return out.substr(0, out.find("\n\n")); };
  CHECK(gpu.output.find("the ring sends") != std::string::npos);
  CHECK(text(gpu.output) == text(cpu.output));
  // bf16 on the GPU: it runs (its GEMMs at 2-byte alignment included) and says something.
  const auto bf16 = run_ringzero(args.substr(0, args.size() - std::string("fp32").size()) + "bf16 --device cuda:0", 120);
  INFO("bf16:\n" << bf16.output);
  CHECK(bf16.status == 0);
}

int main(int argc, char** argv) {
  // Ask in a child: this process only runs the binary and never needs CUDA itself.
  const std::string why = rz::test::probe_in_child(rz::cuda_ring_unavailable);
  if (!why.empty()) {
    std::printf("test_train_cuda: SKIPPED: %s\n", why.c_str());
    return 77;
  }
  return rz::test::run_catch_session(argc, argv);
}
