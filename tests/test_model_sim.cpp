// The whole model on the simulated device (--device sim, kernels/sim): forward with and
// without targets, backward, accumulation, logits and the parameter accessors, in fp32
// and bf16, every attention and recompute mode. Its ops are the CPU's, so losses,
// gradients and logits must be the CPU backend's bitwise; and since its memory cannot be
// touched by host code, any host/device mix-up in model/gpt2.cpp fails here as it would
// on a GPU (a host pointer handed to an op is an error naming the op and the argument; a
// host read of a device buffer dies at that line).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "base/memory.h"
#include "kernels/registry/device_registry.h"
#include "model/gpt2.h"

using namespace rz;

namespace {

GPT2Config sim_config() {
  GPT2Config c;
  c.num_layers = 2;
  c.channels = 48;
  c.num_heads = 4;
  c.vocab_size = 100;  // Vp = 128: padded columns
  c.max_seq_len = 16;
  finalize_config(c);
  return c;
}

std::vector<int> tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int> t(n);
  for (int& x : t) x = int(g() % uint64_t(V));
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Run {
  std::vector<float> losses, grads, logits, params;
};

// Two micro-steps of forward + backward (accumulating, loss scale 1/2), then a forward
// without targets; everything that comes back to the host.
Run run(const GPT2Config& cfg, ModelOptions opts, Device dev) {
  opts.device = dev;
  if (!dev.is_cpu()) opts.backend = make_backend(dev);
  GPT2 m(cfg, opts);
  REQUIRE(m.device() == dev);
  m.init_random(7);
  const int B = 2, T = 12;
  FullGradSink sink(m.layout().total, opts.precision, m.backend());
  sink.zero();
  Run r;
  for (int micro = 0; micro < 2; ++micro) {
    const auto x = tokens(size_t(B) * T, cfg.vocab_size, 10 + micro), y = tokens(size_t(B) * T, cfg.vocab_size, 20 + micro);
    r.losses.push_back(m.forward(x.data(), y.data(), B, T));
    m.backward(sink, 0.5f);
  }
  r.grads.resize(m.layout().total);
  sink.get_f32(r.grads.data());
  const auto x = tokens(size_t(B) * T, cfg.vocab_size, 30);
  r.losses.push_back(m.forward(x.data(), nullptr, B, T));
  m.logits_f32(r.logits);
  r.params.resize(m.layout().total);
  m.get_params_f32(r.params.data());
  // A range in the middle round-trips through set/get on the device too.
  std::vector<float> part(1000);
  m.get_params_f32(500, part.size(), part.data());
  REQUIRE(std::memcmp(part.data(), r.params.data() + 500, part.size() * sizeof(float)) == 0);
  for (float& p : part) p *= 0.5f;
  m.set_params_f32(500, part.size(), part.data());
  std::vector<float> back(part.size());
  m.get_params_f32(500, back.size(), back.data());
  REQUIRE(same_bits(back, part));
  return r;
}

}  // namespace

TEST_CASE("the model on the simulated device: losses, gradients and logits are the CPU's bitwise", "[model][sim]") {
  const GPT2Config cfg = sim_config();
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (Attention att : {Attention::materialized, Attention::flash})
      for (Recompute rc : {Recompute::none, Recompute::gelu, Recompute::layer}) {
        CAPTURE(precision_name(p), attention_name(att), recompute_name(rc));
        ModelOptions opts(p, rc);
        opts.attention = att;
        const Run cpu = run(cfg, opts, Device{});
        const Run sim = run(cfg, opts, Device{DeviceKind::sim, 0});
        CHECK(same_bits(sim.losses, cpu.losses));
        CHECK(same_bits(sim.grads, cpu.grads));
        CHECK(same_bits(sim.logits, cpu.logits));
        CHECK(same_bits(sim.params, cpu.params));
        CHECK(cpu.losses[0] > 0.0f);
      }
}

TEST_CASE("model memory on the simulated device is device memory, per tag", "[model][sim]") {
  MemoryTracker& mt = MemoryTracker::global();
  const size_t host_params = mt.current(MemTag::params), host_acts = mt.current(MemTag::activations);
  ModelOptions on_sim(Precision::fp32, Recompute::none, Device{DeviceKind::sim, 1});
  on_sim.backend = make_backend(on_sim.device);
  GPT2 m(sim_config(), on_sim);
  const size_t want = m.layout().total * sizeof(float);
  CHECK(mt.current(MemTag::params, DeviceKind::sim) >= want);
  CHECK(mt.current(MemTag::params) == host_params);
  m.init_random(1);
  const auto x = tokens(16, 100, 1);
  m.forward(x.data(), x.data(), 2, 8);
  CHECK(mt.current(MemTag::activations, DeviceKind::sim) >= m.activation_capacity_bytes());
  CHECK(mt.current(MemTag::activations) == host_acts);
}
