// train/run_paths.h: what a training run reads and writes, for base/file.h's check that no
// output destroys an input or a file that is not its own.
#pragma once

#include <vector>

#include "base/file.h"
#include "data/output_paths.h"
#include "train/config.h"

namespace rz {

// The files a run reads: the config file, every train and validation shard with the
// meta.json and tokenizer.bin `prepare` wrote beside them, --init (its files), --hellaswag, a tokenizer.bin given by
// path, and --gpt2-dir with its encoder.json and vocab.bpe. A data pattern that matches
// nothing adds nothing (the loader names it later).
std::vector<RunPath> train_inputs(const TrainConfig& cfg);

// What a run writes, reads and reads as shards, for data/output_paths.h's check_outputs:
// the files metrics, memory_report and trace; the directories save_dir and tensorboard; the
// record directory flight_dir (when given); train_inputs; the data and val_data patterns. A
// new output of `train` is one more line here.
CommandPaths train_paths(const TrainConfig& cfg);

// Before any work (the launcher and every rank): check_outputs(train_paths(cfg)), so metrics,
// memory_report or trace may not be over an input or anything but a regular file (/dev/null
// discards), a name the data patterns match, or inside a prepared data directory; two
// outputs may not be one file; save_dir and tensorboard may not be a non-directory, lie
// inside an input or data directory, or hold an input (an --init model inside save_dir would
// be pruned with the checkpoints). Nor may a file output or the tensorboard directory lie
// inside one of save_dir's checkpoints.
void check_train_paths(const TrainConfig& cfg);

}  // namespace rz
