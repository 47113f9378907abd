// model/model.h: a decoder-only transformer's forward and backward over the flat parameter
// buffer, for every family of model/family.h (GPT-2, Llama).
//
// Shapes follow llm.c. Parameters are stored in the model's precision (fp32 or bf16);
// in bf16 mode activations are bf16 too and every kernel computes in fp32. The
// optimizer's fp32 master weights and AdamW state belong to the strategy (zero/), not
// here: the model only reads params() and writes gradients into a GradSink.
//
// The model owns its Backend (kernels/backend.h), chosen by ModelOptions::device: its
// parameters and activations live in that backend's memory and every op goes through its
// table. params() and the GradSink's pointers are therefore device pointers on a GPU;
// the *_f32 accessors copy to and from the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/memory.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/grad_sink.h"
#include "model/layout.h"

namespace rz {

struct ModelOptions {
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  Device device;                // where parameters and activations live (the host by default)
  // The op table on `device`, shared with the rank's placement (train/rank_setup.h's
  // place_rank builds it once per rank). Null: the host's shared cpu_backend() (cpu only).
  std::shared_ptr<Backend> backend;
  Attention attention = Attention::materialized;  // what attention saves for backward
  // Host parameters in memory peer processes can map (Buffer::allocate_shared): the
  // launcher sets it when the strategy gathers into them over a communicator that reads
  // such memory in place (zero1/zero2 over shm). Ignored on a GPU.
  bool shared_params = false;

  // A constructor rather than an aggregate, so `ModelOptions{prec, Recompute::none}` stays
  // valid as fields are added (GCC's -Wmissing-field-initializers would reject it otherwise).
  ModelOptions(Precision p = Precision::fp32, Recompute r = Recompute::none, Device dev = {})
      : precision(p), recompute(r), device(dev) {}
};

// Where the parameters come from when the model does not hold them all (ZeRO-3,
// zero/zero3.h). The model acquires a unit (param_unit_ranges in model/layout.h) right
// before it reads the unit's parameters and releases it right after; `next` is the unit it
// will acquire next (-1: none), which the gate may start fetching now. acquire returns the
// unit's first element (its tensors then lie at their layout offsets minus the unit's
// start), valid until release.
class ParamGate {
 public:
  virtual ~ParamGate() = default;
  virtual const void* acquire(int unit, int next) = 0;
  virtual void release(int unit) = 0;
};

class Model {
 public:
  Model(const ModelConfig& cfg, const ModelOptions& opts);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const ParamLayout& layout() const;
  Precision precision() const;
  Device device() const;
  Backend& backend();  // the op table the strategies use for the optimizer too

  // layout().total elements, float (fp32) or bf16 (bf16 mode); MemTag::params, on device().
  void* params();
  const void* params() const;
  // Copies to / from an fp32 array in the internal layout (rounds to bf16 in bf16 mode).
  void get_params_f32(float* out) const;
  void set_params_f32(const float* in);
  // The same for layout elements [begin, begin + n) only (checkpoints stream in chunks; on a
  // GPU in bf16 mode these use an n-element host staging vector).
  void get_params_f32(size_t begin, size_t n, float* out) const;
  void set_params_f32(size_t begin, size_t n, const float* in);

  // Reads every parameter through `gate` from now on and releases the model's own
  // parameter buffer (params() is then null, and the *_f32 accessors and init_random
  // refuse: the gate's owner holds the parameters). nullptr detaches: the model is then
  // without parameters and forward refuses to run.
  void set_param_gate(ParamGate* gate);

  // GPT-2 initialisation as llm.c does it (normal(0, 0.02), residual projections scaled
  // by 1/sqrt(2L), biases zero, norm weights one), deterministic in the seed, for every
  // family (Llama's reference code initialises the same way: std 0.02, as HF's
  // initializer_range). Padded rows of wte (and of an untied lmhead) are zero.
  void init_random(uint64_t seed);

  // inputs, targets: (B, T) token ids; targets may be null (no loss). Activations are
  // (re)allocated for the largest (B, T) seen (MemTag::activations). Returns the mean
  // loss over B*T (NaN-free check is the caller's), or 0 when targets is null.
  float forward(const int* inputs, const int* targets, int B, int T);

  // Backward of the last forward (which must have had targets). The loss gradient is
  // loss_scale / (B*T) per position: pass 1/grad_accum_steps when accumulating.
  void backward(GradSink& sink, float loss_scale = 1.0f);

  // The per-position losses of the last forward with targets, (B*T) on the host (forward
  // returns their mean); scoring (HellaSwag, bits per byte) reads them.
  const std::vector<float>& position_losses() const;

  // Logits of the last forward as fp32 on the host: (B, T, Vp) row-major, padded columns
  // included; after forward_cached, the last position's only (Vp).
  void logits_f32(std::vector<float>& out) const;

  // Sampling with a KV cache (B = 1; train/generate.h). Per layer a K and a V cache of
  // (positions, NKV*hs) in the model's precision on its device (MemTag::activations; GQA
  // keeps NH/NKV times less than one row per query head), filled by forward_cached. reserve_kv_cache makes room for positions 0 .. positions - 1
  // (positions <= maxT) and empties it; release_kv_cache frees it.
  void reserve_kv_cache(int positions);
  void release_kv_cache();
  // The forward of positions pos .. pos + n - 1 of one sequence, given their n tokens:
  // positions 0 .. pos - 1 come from the cache (filled by the calls since the reserve; pos
  // at most what they filled, a smaller pos rewinds) and the new positions' k and v are
  // written into it, so a new token costs one position's forward instead of the window's.
  // Exact while the sequence fits the cache: a window that slides past it would move every
  // position (GPT-2's learned ones, and the rotation of the keys already cached), so it
  // cannot reuse it. A forward, a change of parameters or a reserve
  // empties the cache. The logits are the last position's (logits_f32).
  void forward_cached(const int* tokens, int n, int pos);
  int kv_cached_positions() const;  // positions the cache holds now

  Recompute recompute() const;
  // activation_bytes() for the largest (B, T) forwarded so far (0 before any forward).
  size_t activation_capacity_bytes() const;

  // Activation bytes the model would allocate for (B, T) (MemTag::activations, exactly:
  // the tracker sees this much after a forward of that shape); used by `ringzero memory`.
  static size_t activation_bytes(const ModelConfig& cfg, const ModelOptions& opts, int B, int T);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rz
