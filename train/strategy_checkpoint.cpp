// train/strategy_checkpoint.cpp: the bridge between a strategy and the checkpoint files.
//
// Three owners, one concern each: train/checkpoint.cpp owns the files (their format,
// atomic writes, checksums, verification, reading the ranges a rank needs) and knows no
// strategy; each strategy owns its arrays and streams them in chunks through its CheckpointState
// (zero/checkpoint_state.h, zero/strategy_state.cpp); this file joins
// the two for the trainer: which ranges and step go in a rank's header, which chunks go
// to which setter on resume, and the model's files (model/saved_model.h) from the strategy's
// parameter chunks.
#include "train/strategy_checkpoint.h"

#include <exception>
#include <memory>

#include "model/saved_model.h"

namespace rz {

void save_strategy_state(const std::string& path, const Strategy& strategy, RankState header) {
  const CheckpointState& st = strategy.checkpoint_state();
  header.optimizer_step = st.optimizer_step();
  header.ranges.clear();
  for (const auto& [b, e] : st.owned_ranges()) header.ranges.emplace_back(b, e);
  write_rank_state(path, header, [&](const StateChunkSink& emit) {
    st.visit_optimizer_state([&](StateArray a, const float* data, size_t n) { emit(static_cast<int>(a), data, n); });
  });
}

std::string save_model_file(const std::string& dir, Strategy& strategy, const GPT2Config& cfg, Precision precision) {
  CheckpointState& st = strategy.checkpoint_state();
  std::string error;
  std::unique_ptr<SavedModelWriter> out;
  const std::string& path = dir;
  if (!path.empty()) {
    try {
      out = make_saved_model_writer(dir, cfg, precision);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const ParamChunkFn fn = [&](size_t begin, const float* data, size_t n) {
    if (!error.empty()) return;  // keep gathering with the others; write nothing more
    try {
      out->write(begin, data, n);
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  st.visit_params_f32(path.empty() ? nullptr : &fn);
  if (out != nullptr && error.empty()) {
    try {
      out->commit();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  return error;
}

void restore_strategy_state(const LoadedCheckpoint& ck, Strategy& strategy) {
  CheckpointState& st = strategy.checkpoint_state();
  StateTarget target;
  for (const auto& [b, e] : st.param_ranges()) target.master_ranges.emplace_back(b, e);
  for (const auto& [b, e] : st.owned_ranges()) target.moment_ranges.emplace_back(b, e);
  target.chunk_elems = st.state_chunk_elems();
  target.put = [&](int array, uint64_t begin, const float* data, size_t n) {
    if (array == kStateMaster)
      st.set_master_chunk(static_cast<size_t>(begin), data, n);
    else
      st.set_moment_chunk(array == kStateM ? StateArray::m : StateArray::v, static_cast<size_t>(begin), data, n);
  };
  read_checkpoint_state(ck, target);
  st.set_optimizer_step(ck.optimizer_step);
}

}  // namespace rz
