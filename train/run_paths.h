// train/run_paths.h: what a training run reads and writes, for base/file.h's check that no
// output destroys an input or a file that is not its own.
#pragma once

#include <vector>

#include "base/file.h"
#include "train/config.h"

namespace rz {

// The files a run reads: the config file, every train and validation shard with the
// meta.json and tokenizer.bin `prepare` wrote beside them, --init, a tokenizer.bin given by
// path, and --gpt2-dir with its encoder.json and vocab.bpe. A data pattern that matches
// nothing adds nothing (the loader names it later).
std::vector<RunPath> train_inputs(const TrainConfig& cfg);

// Before any work (the launcher and every rank): refuses metrics, memory_report or trace
// over an input or over anything but a regular file (/dev/null discards), two outputs that
// are one file, and a save_dir or tensorboard directory that is not a directory, lies
// inside an input directory or holds an input (an --init model inside save_dir would be
// pruned with the checkpoints), or lies inside a checkpoint directory.
void check_train_paths(const TrainConfig& cfg);

}  // namespace rz
