// zero/checkpoint_state.h: what a checkpoint reads from and writes into a strategy.
//
// Layout-independent, so a checkpoint written with N ranks resumes with M: each rank saves
// what it owns, in flat-layout coordinates without padding, and loading hands each rank
// only the ranges it needs. Both directions go in chunks: a chunk points into the
// strategy's own arrays where they are fp32 on the host, else into one scratch buffer of
// at most state_chunk_elems() floats (MemTag::workspace); nothing full-size is made.
// The strategy's implementation is zero/strategy_state.cpp; train/strategy_checkpoint.cpp
// joins it to the files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace rz {

// The optimizer-state arrays a checkpoint holds, in the order it holds them.
enum class StateArray : int { master = 0, m = 1, v = 2 };
using StateChunkFn = std::function<void(StateArray array, const float* data, size_t n)>;
using ParamChunkFn = std::function<void(size_t begin, const float* data, size_t n)>;

class CheckpointState {
 public:
  virtual ~CheckpointState() = default;

  virtual std::vector<std::pair<size_t, size_t>> owned_ranges() const = 0;  // [begin, end) in the flat layout
  // fp32 master weights, then AdamW m, then v, each over owned_ranges() in order, as
  // consecutive chunks: fn(array, data, n), valid only during the call.
  virtual void visit_optimizer_state(const StateChunkFn& fn) const = 0;
  // Loading. The layout ranges whose master values this rank needs: where it holds the
  // parameters (all of them, or the owned shard where the parameters are sharded).
  virtual std::vector<std::pair<size_t, size_t>> param_ranges() const = 0;
  // Master values of layout elements [begin, begin + n): the parameters there (rounded to
  // the model's precision) and, where this rank owns them, its master copy. Parts outside
  // param_ranges() are ignored.
  virtual void set_master_chunk(size_t begin, const float* data, size_t n) = 0;
  // AdamW m or v of [begin, begin + n); parts outside owned_ranges() are ignored.
  virtual void set_moment_chunk(StateArray which, size_t begin, const float* data, size_t n) = 0;
  virtual void set_optimizer_step(uint64_t step) = 0;
  virtual uint64_t optimizer_step() const = 0;  // AdamW's t: steps taken so far
  // The full parameters as fp32, as chunks fn(begin, data, n) covering [0, layout total)
  // once each (not necessarily in layout order); fn may be null on a rank that does not
  // need them. Collective: every rank calls it (sharded parameters are all-gathered unit
  // by unit; replicated ones are read from the model).
  virtual void visit_params_f32(const ParamChunkFn* fn) = 0;
  // The most floats a checkpoint scratch buffer holds: one --bucket-mb of fp32, at least 16K.
  virtual size_t state_chunk_elems() const = 0;

  // visit_optimizer_state concatenated into vectors (tests and tools; the writer streams).
  void get_optimizer_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) const;
  // visit_params_f32 into a full array (tests and tools); null on ranks that do not need it.
  void params_f32(float* out);
};

}  // namespace rz
