// `ringzero verify` against an independent fp64 reference, and `ringzero sample`.
//
// The test writes both llm.c files itself, byte by byte (not with model/checkpoint), from
// the naive fp64 GPT-2 in test_model_reference.h: its logits and loss, and gradients by
// central differences of its loss. verify must pass (also at tolerances 1000x tighter
// than llm.c's), and fail once one gradient element is perturbed.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "run_ringzero.h"
#include "model/llmc_file.h"
#include "model/gpt2.h"
#include "test_model_reference.h"

namespace fs = std::filesystem;

namespace {

using Result = rz::test::BinaryRun;
using rz::test::run_ringzero;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("rz_verify_test_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

template <typename X>
void put(std::ofstream& f, const std::vector<X>& v) {
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(X)));
}

}  // namespace

TEST_CASE("ringzero verify passes against the fp64 reference and catches a wrong gradient", "[verify]") {
  TempDir dir;
  const reftest::RefConfig rc{2, 8, 2, 11, 64, 8};  // L, C, NH, V, Vp, maxT
  const int B = 2, T = 5;
  reftest::RefOffsets o(rc);
  std::mt19937_64 g(17);
  std::normal_distribution<double> d(0.0, 0.3);
  std::vector<double> p(o.total);
  for (double& x : p) x = double(float(d(g)));
  for (size_t i = 0; i < size_t(rc.L) * rc.C; ++i) {
    p[o.ln1w + i] = double(float(1 + 0.1 * d(g)));
    p[o.ln2w + i] = double(float(1 + 0.1 * d(g)));
  }
  for (size_t i = size_t(rc.V) * rc.C; i < size_t(rc.Vp) * rc.C; ++i) p[o.wte + i] = 0;  // padded rows
  std::vector<int> x(B * T), y(B * T);
  for (int i = 0; i < B * T; ++i) {
    x[i] = int(g() % rc.V);
    y[i] = int(g() % rc.V);
  }
  std::vector<double> logits;
  const double loss = reftest::ref_forward(rc, p, x.data(), y.data(), B, T, &logits);
  const std::vector<double> grads = reftest::ref_grads_fd(rc, p, x.data(), y.data(), B, T);

  {
    std::ofstream f(dir.file("model.bin"), std::ios::binary);
    std::vector<int32_t> h(256, 0);
    h[0] = 20240326, h[1] = 3, h[2] = rc.maxT, h[3] = rc.V, h[4] = rc.L, h[5] = rc.NH, h[6] = rc.C, h[7] = rc.Vp;
    put(f, h);
    put(f, std::vector<float>(p.begin(), p.end()));
  }
  auto write_state = [&](const std::string& path, const std::vector<double>& gr) {
    std::ofstream f(path, std::ios::binary);
    std::vector<int32_t> h(256, 0);
    h[0] = 20240327, h[1] = 2, h[2] = B, h[3] = T;
    put(f, h);
    put(f, x);
    put(f, y);
    put(f, std::vector<float>(logits.begin(), logits.end()));
    put(f, std::vector<float>{float(loss)});
    put(f, std::vector<float>(gr.begin(), gr.end()));
  };
  write_state(dir.file("state.bin"), grads);

  const std::string files = "--model " + dir.file("model.bin") + " --state " + dir.file("state.bin");
  Result r = run_ringzero("verify " + files);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("dh1.qkvw") != std::string::npos);
  CHECK(r.output.find("verify: OK") != std::string::npos);
  std::printf("%s", r.output.substr(r.output.find("verify: loss")).c_str());

  // far tighter than llm.c's bars: fp32 against fp64 finite differences
  Result tight = run_ringzero("verify " + files + " --logits-atol 1e-5 --loss-atol 1e-5 --grads-atol 1e-5 --quiet");
  INFO(tight.output);
  CHECK(tight.status == 0);

  Result bf = run_ringzero("verify " + files + " --precision bf16");
  INFO(bf.output);
  CHECK(bf.status == 0);
  std::printf("bf16: %s", bf.output.substr(bf.output.find("verify: loss")).c_str());

  std::vector<double> wrong = grads;
  wrong[o.qkvw + 3 * rc.C * rc.C + 5] += 0.05;  // one element of layer 1's qkvw
  write_state(dir.file("wrong.bin"), wrong);
  Result w = run_ringzero("verify --model " + dir.file("model.bin") + " --state " + dir.file("wrong.bin"));
  INFO(w.output);
  CHECK(w.status != 0);
  CHECK(w.output.find("dh1.qkvw") != std::string::npos);
  CHECK(w.output.find("FAIL") != std::string::npos);

  Result missing = run_ringzero("verify --model " + dir.file("model.bin") + " --state " + dir.file("nope.bin"));
  CHECK(missing.status == 1);
  CHECK(missing.output.find("nope.bin") != std::string::npos);
  CHECK(run_ringzero("verify --model " + dir.file("model.bin")).status != 0);  // --state is required
  CHECK(run_ringzero("verify " + files + " --bogus").status != 0);
  CHECK(run_ringzero("verify --help").status == 0);
}

TEST_CASE("ringzero sample continues a prompt, deterministic in the seed", "[sample]") {
  TempDir dir;
  rz::GPT2Config cfg = rz::model_preset("tiny");
  rz::GPT2 model(cfg, rz::ModelOptions{});
  model.init_random(5);
  std::vector<float> w(model.layout().total);
  model.get_params_f32(w.data());
  rz::write_model_file(dir.file("m.bin"), cfg, rz::Precision::fp32, w.data());
  const std::string base = "sample --model " + dir.file("m.bin") + " --tokenizer byte --prompt hello --tokens 20";
  Result a = run_ringzero(base + " --seed 3 --top-k 40"), b = run_ringzero(base + " --seed 3 --top-k 40");
  INFO(a.output);
  REQUIRE(a.status == 0);
  CHECK(a.output.rfind("hello", 0) == 0);
  CHECK(a.output == b.output);
  Result greedy = run_ringzero(base + " --temperature 0");
  CHECK(greedy.status == 0);
  CHECK(run_ringzero(base + " --temperature -1").status != 0);
  CHECK(run_ringzero("sample --model " + dir.file("none.bin") + " --prompt x").status == 1);
  // --window: each forward sees only the last W tokens (25 > 8, so the contexts differ).
  Result narrow = run_ringzero(base + " --seed 3 --top-k 40 --window 8");
  CHECK(narrow.status == 0);
  CHECK(narrow.output != a.output);
  Result wide = run_ringzero(base + " --window 65");
  CHECK(wide.status == 1);
  CHECK(wide.output.find("--window 65: the model") != std::string::npos);
}

namespace {
// dir/small.toml: a 1-layer, 32-channel byte-level model at B=2 T=16, then `extra` keys.
void write_small_config(TempDir& dir, const std::string& extra) {
  std::ofstream f(dir.file("small.toml"));
  f << "layers = 1\nchannels = 32\nheads = 2\nmax_seq = 16\ntokenizer = \"byte\"\nbatch = 2\nseq = 16\n" << extra;
}
}  // namespace

TEST_CASE("ringzero bench-step benches a training config's shape and splits the step by kernel", "[bench]") {
  TempDir dir;
  write_small_config(dir, "");
  Result r = run_ringzero("bench-step --config " + dir.file("small.toml") +
                          " --threads 1 --precision fp32 --steps 1 --untimed-steps 0 --ops");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("L=1 C=32 NH=2 V=257") != std::string::npos);
  CHECK(r.output.find("B=2 T=16") != std::string::npos);
  CHECK(r.output.find("step split by kernel") != std::string::npos);
  for (const char* op : {"| matmul |", "| attention |", "| layernorm |", "| gelu |", "| adamw |"})
    CHECK(r.output.find(op) != std::string::npos);
  // a flag overrides the config; a bad shape or file is one error line and exit 1
  CHECK(run_ringzero("bench-step --config " + dir.file("small.toml") + " --channels 48 --threads 1 --precision fp32 --steps 1 --untimed-steps 0")
            .output.find("C=48") != std::string::npos);
  CHECK(run_ringzero("bench-step --config " + dir.file("small.toml") + " --seq 17 --threads 1").status == 1);
  CHECK(run_ringzero("bench-step --config " + dir.file("none.toml")).status == 1);
}

// The 2-rank comparison with PyTorch DDP (bench/ddp_vs_torch.sh) reads bench-strategies'
// per-rank step CPU time, on a config's shape.
TEST_CASE("ringzero bench-strategies benches a training config's shape and reports each rank's step CPU", "[bench]") {
  TempDir dir;
  write_small_config(dir, "nproc_per_node = 2\nbucket_mb = 0.01\n");
  Result r = run_ringzero("bench-strategies --config " + dir.file("small.toml") + " --strategy zero2 --steps 2 --untimed-steps 0");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("(L=1 C=32 NH=2 V=257), B=2 T=16, N=2, fp32, buckets 0.01 MiB") != std::string::npos);
  const size_t at = r.output.find("step_cpu_ms");
  REQUIRE(at != std::string::npos);
  double rank0 = 0, ranks[2] = {0, 0};
  REQUIRE(std::sscanf(r.output.c_str() + at, "step_cpu_ms %lf (ranks %lf %lf)", &rank0, &ranks[0], &ranks[1]) == 3);
  CHECK(rank0 > 0.0);
  CHECK(rank0 == ranks[0]);
  CHECK(ranks[1] > 0.0);
  // a flag overrides the config; a bad file is one error line and exit 1
  Result one = run_ringzero("bench-strategies --config " + dir.file("small.toml") +
                            " --nproc 1 --batch 1 --strategy ddp --steps 1 --untimed-steps 0");
  INFO(one.output);
  CHECK(one.status == 0);
  CHECK(one.output.find("B=1 T=16, N=1") != std::string::npos);
  CHECK(one.output.find("(ranks ") != std::string::npos);
  CHECK(run_ringzero("bench-strategies --config " + dir.file("none.toml")).status == 1);
}

// The benches are train's step with a timing hook (train/step.h) and take train's rows of
// the settings table: --weight-decay reaches the strategy's AdamW (bench-strategies' final
// hash moves with it; the table's default 0.1 given explicitly changes nothing), --nproc is
// an alias of --nproc-per-node, and --warmup (train's LR warm-up) is refused with the bench's
// own name for its untimed steps.
TEST_CASE("bench-step and bench-strategies take train's settings rows and run train's step", "[bench]") {
  const std::string base = "bench-strategies --model tiny --vocab 257 --batch 1 --seq 16 --strategy zero1 --steps 2 --untimed-steps 0 ";
  auto hash = [&](const std::string& flags) {
    Result r = run_ringzero(base + flags);
    INFO(flags << "\n" << r.output);
    REQUIRE(r.status == 0);
    const size_t at = r.output.find(" hash ");
    REQUIRE(at != std::string::npos);
    return r.output.substr(at + 6, 16);
  };
  const std::string by_default = hash("--nproc 1");
  CHECK(hash("--nproc-per-node 1 --weight-decay 0.1") == by_default);
  CHECK(hash("--nproc 1 --weight-decay 0") != by_default);
  CHECK(hash("--nproc 1 --lr 1e-3") != by_default);
  for (const char* cmd : {"bench-step --model tiny --threads 1 --warmup 1", "bench-strategies --model tiny --warmup 1"}) {
    Result r = run_ringzero(cmd);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("--warmup: ") != std::string::npos);
    CHECK(r.output.find("untimed steps are --untimed-steps") != std::string::npos);
  }
  Result bad = run_ringzero("bench-step --model tiny --threads 1 --weight-decay -1");
  CHECK(bad.status == 1);
  CHECK(bad.output.find("--weight-decay") != std::string::npos);
}
