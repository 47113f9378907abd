// `ringzero train` on the simulated device (--device sim): every branch the trainer takes
// for a GPU (device buffers, the cuda transport or nccl, the device memory report), on
// CPU processes, where any host/device mix-up fails as it would on a GPU. The ops are the
// CPU's, so losses, gradient norms, validation losses and the saved model are the CPU
// backend's bitwise wherever the collectives add in the same order:
//   --comm ring (the cuda transport over the simulated link): always;
//   --comm nccl (nccl's own logic over the simulated calls, on 1, 2 and 3 ranks): in
//     fp32 (its avg divides the finished sum, as the ring does; in bf16 it rounds twice,
//     so bf16 is checked to train, not bitwise).
// Also: accumulation, eval, sampling, save and resume, and that GPU ranks do not claim
// their parameters sit in shared memory (issue 24 items 2 and 5); and `verify`, `sample`
// and `bench-step` on the simulated device.
#include <map>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/gpt2.h"
#include "model/llmc_file.h"
#include "run_ringzero.h"

namespace fs = std::filesystem;
using rz::test::BinaryRun;
using rz::test::quote;
using rz::test::run_ringzero;

namespace {

fs::path work_dir() {
  static const fs::path dir = rz::test::fresh_temp_dir("rz_test_train_sim_");
  return dir;
}

// Byte-level shards (train + val) of a small generated corpus, with tokenizer.bin beside them.
fs::path data_dir() {
  static const fs::path dir = [] {
    const fs::path text = work_dir() / "text";
    fs::create_directories(text);
    const char* words[] = {"the ring", "sends", "a shard", "to its right", "and gathers", "the bucket."};
    uint64_t x = 99;
    for (int f = 0; f < 20; ++f) {
      std::ofstream out(text / ("doc" + std::to_string(f) + ".txt"));
      for (int s = 0; s < 80; ++s) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        out << words[(x >> 33) % 6] << " " << words[(x >> 40) % 6] << "\n";
      }
    }
    const fs::path out = work_dir() / "data";
    BinaryRun r = run_ringzero("prepare --input " + quote(text.string()) + " --tokenizer byte --val-fraction 0.2 --out " +
                               quote(out.string()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
  }();
  return dir;
}

struct Run {
  BinaryRun out;
  std::vector<nlohmann::json> metrics;
  std::string model;  // the final checkpoint's model.bin, byte for byte
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A 4-step run of the tiny model: 2 micro-steps per step, eval every 2 steps, a sample and
// a checkpoint at the end. name: a fresh directory under the work dir.
Run train(const std::string& name, const std::string& args, bool expect_ok = true) {
  const fs::path d = work_dir() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  const fs::path data = data_dir();
  const std::string cmd =
      "train --model tiny --data " + quote((data / "train_*.bin").string()) + " --val-data " +
      quote((data / "val_*.bin").string()) +
      " --batch 2 --seq 16 --lr 3e-3 --warmup 1 --bucket-mb 0.05 --threads 1 --eval-every 2 --eval-batches 2"
      " --sample-every 4 --sample-tokens 8 --comm-timeout 60 --metrics " +
      quote((d / "m.jsonl").string()) + " --save-dir " + quote((d / "ck").string()) + " " + args;
  Run r;
  r.out = run_ringzero(cmd, 240);
  INFO(name << ": " << args << "\n" << r.out.output);
  if (!expect_ok) return r;
  REQUIRE(r.out.status == 0);
  std::ifstream in(d / "m.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) r.metrics.push_back(nlohmann::json::parse(line));
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(d / "ck")) steps.push_back(e.path());
  std::sort(steps.begin(), steps.end());
  REQUIRE(!steps.empty());
  r.model = slurp(steps.back() / "model.bin");
  return r;
}

// Per step: loss, grad norm and validation loss, as the JSONL holds them (exact doubles of floats).
std::vector<std::string> curve(const Run& r) {
  std::vector<std::string> c;
  for (const auto& m : r.metrics)
    c.push_back(m["loss"].dump() + " " + m["grad_norm"].dump() + " " + (m.contains("val_loss") ? m["val_loss"].dump() : "-"));
  return c;
}

std::string common(int nranks, const std::string& strategy, const std::string& precision, int steps = 4) {
  // 2 micro-steps of B*T*N tokens per optimizer step.
  return "--steps " + std::to_string(steps) + " --nproc-per-node " + std::to_string(nranks) + " --strategy " + strategy + " --precision " +
         precision + " --total-batch-tokens " + std::to_string(2 * 2 * 16 * nranks);
}

}  // namespace

TEST_CASE("train on the simulated device over the cuda transport is the CPU's run, bitwise", "[train][sim]") {
  for (const char* precision : {"fp32", "bf16"})
    for (const char* strategy : {"ddp", "zero1", "zero2"}) {
      CAPTURE(precision, strategy);
      const std::string args = common(2, strategy, precision);
      const Run cpu = train(std::string("cpu_") + strategy + precision, args + " --device cpu");
      const Run sim = train(std::string("simring_") + strategy + precision, args + " --device sim --comm ring");
      INFO(sim.out.output);
      REQUIRE(sim.metrics.size() == 4);
      CHECK(curve(sim) == curve(cpu));
      CHECK(sim.model == cpu.model);
      CHECK(sim.out.output.find("transport cuda") != std::string::npos);
      CHECK(sim.out.output.find("on sim:0") != std::string::npos);  // the memory report: device bytes
      CHECK(sim.out.output.find("---- sample after step 4") != std::string::npos);
      CHECK(sim.metrics[1].contains("val_loss"));
      // The step records count the device's bytes (the model states live there), the CPU run's the host's.
      const uint64_t param_bytes = 124672ull * (std::string(precision) == "fp32" ? 4 : 2);
      CHECK(sim.metrics[0]["mem_peak_bytes"]["params"].get<uint64_t>() >= param_bytes);
      for (const char* tag : {"params", "grads", "master", "adam_m", "adam_v", "activations"}) {
        CAPTURE(tag);  // comm and workspace: each transport's own buffers
        CHECK(sim.metrics[0]["mem_peak_bytes"][tag] == cpu.metrics[0]["mem_peak_bytes"][tag]);
      }
    }
}

TEST_CASE("train --comm nccl on the simulated device: 1, 2 and 3 ranks, the CPU ring's run bitwise in fp32",
          "[train][sim]") {
  for (int n : {1, 2, 3})
    for (const char* strategy : {"ddp", "zero1", "zero2"}) {
      if (n == 1 && std::string(strategy) != "ddp") continue;
      CAPTURE(n, strategy);
      const std::string args = common(n, strategy, "fp32");
      const Run cpu = train("cpu_" + std::to_string(n) + strategy, args + " --device cpu");
      const Run sim = train("simnccl_" + std::to_string(n) + strategy, args + " --device sim --comm nccl");
      INFO(sim.out.output);
      REQUIRE(sim.metrics.size() == 4);
      CHECK(curve(sim) == curve(cpu));
      CHECK(sim.model == cpu.model);
      CHECK(sim.out.output.find("transport nccl") != std::string::npos);
    }
  SECTION("bf16 trains (nccl's avg rounds the sum before dividing: within rounding of the ring)") {
    const std::string args = common(2, "zero2", "bf16");
    const Run cpu = train("cpu_2zero2bf16", args + " --device cpu");
    const Run sim = train("simnccl_2zero2bf16", args + " --device sim --comm nccl");
    REQUIRE(sim.metrics.size() == 4);
    for (size_t i = 0; i < 4; ++i)
      CHECK(sim.metrics[i]["loss"].get<double>() == Approx(cpu.metrics[i]["loss"].get<double>()).epsilon(2e-2));
  }
}

TEST_CASE("train on the simulated device resumes bitwise, over either communicator", "[train][sim]") {
  for (const char* comm : {"ring", "nccl"}) {
    CAPTURE(comm);
    const std::string dev = std::string(" --device sim --comm ") + comm;
    const std::string args = common(2, "zero2", "fp32") + dev;
    const Run full = train(std::string("full_") + comm, args + " --save-every 2");
    // Steps 1-2, then a second process resumes from the step-2 checkpoint for 3-4.
    const fs::path d = work_dir() / (std::string("resumed_") + comm);
    const Run first = train(std::string("resumed_") + comm, common(2, "zero2", "fp32", 2) + dev + " --save-every 2");
    REQUIRE(first.metrics.size() == 2);
    const fs::path data = data_dir();
    BinaryRun second = run_ringzero(
        "train --model tiny --data " + quote((data / "train_*.bin").string()) + " --val-data " +
            quote((data / "val_*.bin").string()) +
            " --batch 2 --seq 16 --lr 3e-3 --warmup 1 --bucket-mb 0.05 --threads 1 --eval-every 2 --eval-batches 2"
            " --sample-every 4 --sample-tokens 8 --comm-timeout 60 --metrics " +
            quote((d / "m.jsonl").string()) + " --save-dir " + quote((d / "ck").string()) + " " + args +
            " --save-every 2 --resume",
        240);
    INFO(second.output);
    REQUIRE(second.status == 0);
    CHECK(second.output.find("resumed from") != std::string::npos);
    std::vector<std::string> resumed;
    std::ifstream in(d / "m.jsonl");
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const auto m = nlohmann::json::parse(line);
      resumed.push_back(m["loss"].dump() + " " + m["grad_norm"].dump() + " " +
                        (m.contains("val_loss") ? m["val_loss"].dump() : "-"));
    }
    CHECK(resumed == curve(full));
    CHECK(slurp(d / "ck" / "step_00000004" / "model.bin") == full.model);
  }
}

TEST_CASE("GPU ranks do not claim shared-memory parameters; zero3 stays on CPU ranks", "[train][sim]") {
  const Run sim = train("shared_sim", common(2, "zero2", "fp32") + " --device sim --comm ring");
  CHECK(sim.out.output.find("parameters in shared memory") == std::string::npos);
  const Run cpu = train("shared_cpu", common(2, "zero2", "fp32") + " --device cpu");
  CHECK(cpu.out.output.find("parameters in shared memory") != std::string::npos);
  // --trace on nccl ranks: the events travel as host text, through the device.
  const fs::path trace = work_dir() / "nccl_trace.json";
  const Run traced = train("trace_nccl", common(2, "ddp", "fp32") + " --device sim --comm nccl --trace " +
                                             quote(trace.string()) + " --trace-steps 2:3");
  std::ifstream tin(trace);
  const auto tj = nlohmann::json::parse(tin);
  CHECK(tj["traceEvents"].size() > 10);
  // The simulated device has a DeviceClock, as a GPU: compute spans are its stamps, and
  // every rank's collectives are comm-track spans stamped on the comm stream.
  std::map<int, int> comm_spans, compute_spans;
  for (const auto& e : tj["traceEvents"]) {
    if (e["ph"] != "X") continue;
    REQUIRE(e["dur"].get<double>() >= 0.0);
    (e["tid"] == 2 ? comm_spans : compute_spans)[e["pid"].get<int>()] += 1;
  }
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(comm_spans[r] >= 2);  // at least the gradients' AllReduce and the loss, per step
    CHECK(compute_spans[r] >= 2);
  }
  const Run z3 = train("zero3_sim", common(2, "zero3", "fp32") + " --device sim", false);
  CHECK(z3.out.status != 0);
  CHECK(z3.out.output.find("zero3 runs on CPU ranks only") != std::string::npos);
  // One GPU rank too, and from the setup's check before the rendezvous and the model's
  // allocation (its "with N ranks"), not from the strategy's after them.
  const Run z3_one = train("zero3_sim_one", common(1, "zero3", "fp32") + " --device sim", false);
  CHECK(z3_one.out.status != 0);
  CHECK(z3_one.out.output.find("device sim:0 with 1 ranks: zero3 runs on CPU ranks only") != std::string::npos);
}

TEST_CASE("verify, sample and bench-step on the simulated device: the CPU's numbers", "[train][sim]") {
  // A model and a debug state made here on the CPU: verify on either device must find
  // the same (zero) differences, printed identically.
  const fs::path d = work_dir() / "verify";
  fs::create_directories(d);
  rz::GPT2Config cfg = rz::model_preset("tiny");
  rz::GPT2 model(cfg, rz::ModelOptions{});
  model.init_random(11);
  std::vector<float> w(model.layout().total);
  model.get_params_f32(w.data());
  rz::write_model_file((d / "m.bin").string(), cfg, rz::Precision::fp32, w.data());
  rz::DebugState st;
  st.B = 2;
  st.T = 16;
  for (int i = 0; i < st.B * st.T; ++i) {
    st.x.push_back((i * 37 + 5) % cfg.vocab_size);
    st.y.push_back((i * 11 + 3) % cfg.vocab_size);
  }
  st.loss = model.forward(st.x.data(), st.y.data(), st.B, st.T);
  std::vector<float> logits;
  model.logits_f32(logits);
  for (int n = 0; n < st.B * st.T; ++n)
    st.logits.insert(st.logits.end(), logits.begin() + size_t(n) * cfg.padded_vocab_size,
                     logits.begin() + size_t(n) * cfg.padded_vocab_size + cfg.vocab_size);
  rz::FullGradSink sink(model.layout().total, rz::Precision::fp32);
  model.backward(sink, 1.0f);
  st.grads.resize(model.layout().total);
  sink.get_f32(st.grads.data());
  rz::write_debug_state((d / "state.bin").string(), cfg, st);

  const std::string files = "--model " + quote((d / "m.bin").string()) + " --state " + quote((d / "state.bin").string());
  for (const char* precision : {"fp32", "bf16"}) {
    CAPTURE(precision);
    const BinaryRun cpu = run_ringzero("verify " + files + " --precision " + std::string(precision));
    const BinaryRun sim = run_ringzero("verify " + files + " --precision " + std::string(precision) + " --device sim");
    INFO(sim.output);
    REQUIRE(sim.status == 0);
    CHECK(sim.output == cpu.output);
    CHECK(sim.output.find("verify: OK") != std::string::npos);
  }
  const BinaryRun exact = run_ringzero("verify " + files + " --device sim --logits-atol 0 --loss-atol 0 --grads-atol 0");
  INFO(exact.output);
  CHECK(exact.status == 0);  // fp32 on the simulated device is the CPU's forward and backward, bit for bit

  const std::string sample = "sample --model " + quote((d / "m.bin").string()) +
                             " --tokenizer byte --prompt ring --tokens 12 --seed 3 --top-k 20";
  const BinaryRun s_cpu = run_ringzero(sample), s_sim = run_ringzero(sample + " --device sim");
  INFO(s_sim.output);
  REQUIRE(s_sim.status == 0);
  CHECK(s_sim.output == s_cpu.output);

  for (const char* precision : {"fp32", "bf16"}) {
    const BinaryRun b = run_ringzero("bench-step --model tiny --batch 2 --seq 16 --threads 1 --steps 2 --untimed-steps 1 "
                                     "--device sim --precision " + std::string(precision));
    INFO(b.output);
    CHECK(b.status == 0);
    CHECK(b.output.find("bench-step on sim:0") != std::string::npos);
    CHECK(b.output.find("| tiny | " + std::string(precision) + " | 1 |") != std::string::npos);
  }
  const BinaryRun ops = run_ringzero("bench-step --model tiny --device sim --ops");
  CHECK(ops.status != 0);  // the kernel split replays host buffers: CPU only, as on a GPU
}

TEST_CASE("comm-bench on the simulated device: nccl and the cuda transport, every result checked", "[train][sim]") {
  for (const char* comm : {"nccl", "ring"})
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
      CAPTURE(comm, op);
      // 7 elements up: counts 3 does not divide take nccl's padded path.
      // The ring's segments: 4 KiB, many per message (nccl has none to set).
      const std::string seg = std::string(comm) == "ring" ? " --segment-bytes 4096" : "";
      const BinaryRun b = run_ringzero(std::string("comm-bench --device sim --comm ") + comm + " --nproc 3 --op " + op +
                                       " --min-bytes 28 --max-bytes 64K" + seg);
      INFO(b.output);
      CHECK(b.status == 0);  // non-zero when any element is wrong (the #wrong column)
      CHECK(b.output.find(std::string(comm) == "nccl" ? "nccl" : "cuda") != std::string::npos);
    }
}
