// train/strategy_checkpoint.h: a strategy's part of a checkpoint (checkpoint.h), streamed.
//
// The trainer's save and resume go through these three functions, and so does the test
// that holds them to bounded memory (tests/test_train_checkpoint_memory.cpp): between a
// file and the strategy's own arrays there is never more than one scratch chunk
// (CheckpointState::state_chunk_elems() floats, MemTag::workspace) plus the file code's small
// fixed buffers.
#pragma once

#include <string>

#include "model/config.h"
#include "train/checkpoint.h"
#include "zero/strategy.h"

namespace rz {

// Writes this rank's rank_RRRRR.state at `path` from the strategy's arrays (no copy):
// `header` gives rank, world, step, layout_total, loader position and rng; its ranges and
// optimizer step are taken from the strategy here.
void save_strategy_state(const std::string& path, const Strategy& st, RankState header);

// Collective: every rank calls it (zero3 gathers the parameters unit by unit). The rank
// whose `dir` is not empty writes the model's files into that directory (its family's,
// model/saved_model.h: model.bin for GPT-2, config.json + model.safetensors for Llama; in
// `precision`) from the chunks as they come. A write error is returned ("" when fine), not thrown, so that every
// rank finishes the same gathers; a failed collective throws.
std::string save_model_file(const std::string& dir, Strategy& st, const GPT2Config& cfg, Precision precision);

// Reads this rank's part of a verified checkpoint into the strategy: master values where it
// holds parameters (param_ranges), m and v where it owns them (owned_ranges), range by range
// from each old rank's file, and AdamW's step.
void restore_strategy_state(const LoadedCheckpoint& ck, Strategy& st);

}  // namespace rz
