// tests/test_gpu_checks.cpp: the host-side logic of the GPU path and of its tests, held to
// known answers on any machine (the GPU tests themselves skip without a GPU, so their
// rules are proven here):
//   - the tolerance helpers of tests/gpu_compare.h (element-wise, relative norm, per run),
//     and the metrics parser on a real `ringzero train --metrics` file;
//   - the shapes test_model_cuda and test_zero_gpu use do make grid-stride kernels take a
//     second pass (kernels/cuda/grid.h);
//   - the GEMM alignment rule of kernels/gemm_alignment.h, that every preset's operands
//     are planned for 16 bytes, and that a GPU model refuses C off the 16-byte grid.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/check.h"
#include "kernels/gemm_alignment.h"
#include "kernels/registry/device_registry.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "tests/gpu_compare.h"
#include "tests/run_ringzero.h"

using namespace rz;
using namespace rz::test;
namespace fs = std::filesystem;

TEST_CASE("outside_tolerance counts what lies outside atol * rms + rtol * |ref|, NaN included") {
  const std::vector<float> ref = {1.0f, -2.0f, 3.0f, 0.0f};
  CHECK(outside_tolerance(ref, ref, Tol{0, 0}).bad == 0);
  std::vector<float> got = ref;
  // rms(ref) = sqrt(14 / 4) = 1.8708; bound at element 2: 1e-3 * 1.8708 + 1e-3 * 3 = 4.87e-3
  got[2] = 3.0f + 4.8e-3f;
  CHECK(outside_tolerance(got, ref, Tol{1e-3, 1e-3}).bad == 0);
  got[2] = 3.0f + 5.0e-3f;
  const Outside o = outside_tolerance(got, ref, Tol{1e-3, 1e-3});
  CHECK(o.bad == 1);
  CHECK(o.rms == Approx(std::sqrt(3.5)));
  CHECK(o.first.find("[2]") != std::string::npos);
  got[3] = std::nanf("");  // an element a kernel never wrote
  CHECK(outside_tolerance(got, ref, Tol{1e9, 1e9}).bad == 1);
  CHECK(outside_tolerance(std::vector<float>(3), ref, tol<float>()).bad == 4);  // sizes differ

  const std::vector<bf16> rb = {float_to_bf16(1.0f), float_to_bf16(2.0f)};
  std::vector<bf16> gb = rb;
  gb[1] = float_to_bf16(2.0f * (1 + 1.0f / 128));  // one bf16 ulp at 2: inside bf16's 2e-2
  CHECK(outside_tolerance(gb, rb, tol<bf16>()).bad == 0);
  gb[1] = float_to_bf16(2.2f);
  CHECK(outside_tolerance(gb, rb, tol<bf16>()).bad == 1);
}

TEST_CASE("rel_norm is ||got - ref|| / ||ref||") {
  const std::vector<float> ref = {3.0f, 4.0f};
  const std::vector<float> got = {3.03f, 4.04f};
  CHECK(rel_norm(got.data(), ref.data(), 2) == Approx(0.01).epsilon(1e-5));
  const std::vector<float> zero = {0.0f, 0.0f};
  CHECK(rel_norm(ref.data(), zero.data(), 2) == Approx(5.0));
  const std::vector<float> nan = {std::nanf(""), 4.0f};
  CHECK(std::isnan(rel_norm(nan.data(), ref.data(), 2)));
}

TEST_CASE("the GPU tests' large shapes take a second grid-stride pass") {
  using cuda::grid_stride_passes;
  CHECK(grid_stride_passes(0) == 0);
  CHECK(grid_stride_passes(1) == 1);
  CHECK(grid_stride_passes(cuda::kMaxGridBlocks * cuda::kThreads) == 1);
  CHECK(grid_stride_passes(cuda::kMaxGridBlocks * cuda::kThreads + 1) == 2);
  // test_model_cuda: GELU and the fc bias broadcast run over (B*T, 4C).
  const ModelShape s = grid_stride_model_shape();
  const size_t rows = size_t(s.B) * s.T;
  CHECK(grid_stride_passes(rows * 4 * size_t(s.cfg.channels)) == 2);
  CHECK(s.T <= s.cfg.max_seq_len);
  // test_zero_gpu: `train --model tiny --batch kLargeBatch --seq kLargeSeq`, per rank.
  const GPT2Config tiny = model_preset("tiny");
  CHECK(grid_stride_passes(size_t(kLargeBatch) * kLargeSeq * 4 * size_t(tiny.channels)) == 2);
  CHECK(kLargeSeq <= tiny.max_seq_len);
}

TEST_CASE("compare_step_metrics: every loss and step 1's grad norm within the bound") {
  const std::vector<StepMetrics> ref = {{1, 5.0, 2.0}, {2, 4.0, 1.5}, {3, 3.5, 1.2}};
  CHECK(compare_step_metrics(ref, ref, 0.0).empty());
  std::vector<StepMetrics> got = ref;
  got[1].loss = 4.0 * (1 + 5e-4);
  CHECK(compare_step_metrics(got, ref, 1e-3).empty());
  got[1].loss = 4.0 * (1 + 2e-3);
  CHECK(compare_step_metrics(got, ref, 1e-3).find("step 2: loss") != std::string::npos);
  got = ref;
  got[2].grad_norm = 99.0;  // later grad norms may drift with the parameters: not compared
  CHECK(compare_step_metrics(got, ref, 1e-3).empty());
  got[0].grad_norm = 2.1;
  CHECK(compare_step_metrics(got, ref, 1e-3).find("step 1: grad norm") != std::string::npos);
  got = ref;
  got[0].loss = NAN;
  CHECK(!compare_step_metrics(got, ref, 1.0).empty());
  got.pop_back();
  CHECK(compare_step_metrics(got, ref, 1.0).find("steps") != std::string::npos);
  CHECK(!compare_step_metrics(ref, {}, 1.0).empty());
  CHECK(std::isnan(json_number("{\"grad_norm\":null}", "grad_norm")));
  CHECK(json_number("{\"step\":3,\"loss\":2.5e-1}", "loss") == 0.25);
}

TEST_CASE("read_step_metrics reads what `ringzero train --metrics` writes") {
  const fs::path dir = fresh_temp_dir("rz_test_gpu_checks_");
  const fs::path text = dir / "text";
  fs::create_directories(text);
  for (int f = 0; f < 4; ++f) {
    std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
    for (int s = 0; s < 200; ++s) out << "every rank reduces shard " << (s * 3 + f) % 7 << ". ";
  }
  BinaryRun r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --out " +
                             quote((dir / "data").string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::vector<StepMetrics> runs[2];
  for (int k = 0; k < 2; ++k) {
    const fs::path m = dir / (k == 0 ? "m0.jsonl" : "m1.jsonl");
    r = run_ringzero("train --model tiny --data " + quote((dir / "data" / "train_*.bin").string()) +
                     " --batch 2 --seq 32 --steps 3 --threads 1 --metrics " + quote(m.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    runs[k] = read_step_metrics(m.string());
  }
  REQUIRE(runs[0].size() == 3);
  for (int s = 0; s < 3; ++s) {
    CHECK(runs[0][s].step == s + 1);
    CHECK(std::isfinite(runs[0][s].loss));
    CHECK(runs[0][s].grad_norm > 0.0);
  }
  CHECK(compare_step_metrics(runs[1], runs[0], 0.0).empty());  // the CPU is bitwise run to run
  CHECK(read_step_metrics((dir / "missing.jsonl").string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("gemm operands are planned for an alignment fixed by the shape") {
  // The largest power of two <= 16 dividing ld (and the batch stride) in bytes.
  CHECK(gemm_operand_alignment(768, 0, 1, 4) == 16);
  CHECK(gemm_operand_alignment(6, 0, 1, 4) == 8);
  CHECK(gemm_operand_alignment(3, 0, 1, 2) == 2);
  CHECK(gemm_operand_alignment(192, 4, 12, 4) == 16);  // head stride 4 floats
  CHECK(gemm_operand_alignment(192, 2, 12, 2) == 4);   // head stride 2 bf16
  CHECK(gemm_operand_alignment(192, 2, 1, 2) == 16);   // no batch: the stride does not count
  // Every preset: every weight's ld (C, 3C, 4C), every activation's, the heads' stride: 16.
  for (const std::string& name : model_preset_names()) {
    const GPT2Config c = model_preset(name);
    const long long C = c.channels, hs = C / c.num_heads;
    for (size_t es : {size_t(2), size_t(4)}) {
      INFO(name << ", " << es << "-byte elements");
      for (long long ld : {C, 3 * C, 4 * C, (long long)c.padded_vocab_size})
        CHECK(gemm_operand_alignment(ld, 0, 1, es) == 16);
      CHECK(gemm_operand_alignment(3 * C, hs, c.num_heads, es) == 16);
      CHECK(gemm_operand_alignment(C, hs, c.num_heads, es) == 16);
    }
  }
  alignas(16) unsigned char buf[64];
  CHECK_NOTHROW(check_gemm_operand("matmul_forward", "A", buf, 16));
  CHECK_NOTHROW(check_gemm_operand("matmul_forward", "A", buf + 8, 8));
  CHECK_THROWS_WITH(check_gemm_operand("matmul_backward (dweight)", "D", buf + 4, 16),
                    Catch::Contains("matmul_backward (dweight): operand D") && Catch::Contains("not 16-byte aligned"));
}

TEST_CASE("a GPU model refuses channels that would put tensors off the 16-byte grid") {
  // Checked before any device is touched, so it is testable without one.
  GPT2Config odd = model_preset("tiny");
  odd.channels = 12;  // 24 bytes per row in bf16, 48 in fp32
  odd.num_heads = 2;
  const Device gpu{DeviceKind::cuda, 0};
  CHECK_THROWS_WITH(GPT2(odd, ModelOptions(Precision::bf16, Recompute::none, gpu)),
                    Catch::Contains("channels C = 12 are 24 bytes in bf16, not a multiple of 16"));
  // fp32 rows of 48 bytes are on the grid: whatever stops this model here, it is not that.
  try {
    ModelOptions fp32(Precision::fp32, Recompute::none, gpu);
    fp32.backend = make_backend(gpu);  // as place_rank builds it (fails here without a GPU)
    GPT2 m(odd, fp32);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("16-byte grid") == std::string::npos);
  }
  CHECK_NOTHROW(GPT2(odd, ModelOptions(Precision::bf16, Recompute::none, Device{})));  // the CPU takes any C
}
