// data/prepare.h: text files -> llm.c token shards (the engine of `ringzero prepare`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rz {

struct PrepareOptions {
  std::vector<std::string> inputs;       // files, directories (their regular files, sorted), globs
  std::string tokenizer = "byte";        // "byte" or "gpt2"
  std::string gpt2_dir;                  // encoder.json + vocab.bpe, for "gpt2"
  std::string out_dir;                   // gets {train,val}_NNNNNN.bin, tokenizer.bin, meta.json
  double val_fraction = 0.0;             // chance that a document goes to val; 0: all train
  uint64_t shard_tokens = 100000000;     // tokens per shard file (llm.c's 1e8)
  uint64_t seed = 1337;                  // seeds the train/val draw
  bool split_fortunes = false;           // a document per fortune ("%" lines), skip *.dat
  bool progress = true;                  // progress lines on stderr
};

struct PrepareStats {
  uint64_t bytes = 0;                    // text bytes read
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t train_docs = 0, val_docs = 0, empty_docs = 0;
  std::vector<std::string> sources;      // the input files, in the order read
  std::vector<std::string> train_shards, val_shards;  // file names inside out_dir
  double seconds = 0;                    // wall time from the first read to meta.json
  double cpu_seconds = 0;                // this process's CPU time over the same span
};

// The input files PrepareOptions::inputs name, in order, each once (symlinks resolved).
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, bool split_fortunes);

// Streams every input through the tokenizer into shards; memory stays bounded whatever the
// input size. Throws rz::Error naming the file or option on bad input.
// Builds in "<parent>/.<name>.prepare.<pid>" and swaps it with out_dir at the end, so
// out_dir always holds one complete run's shards; out_dir must hold nothing else.
PrepareStats prepare_dataset(const PrepareOptions& opt);

// When dir has prepare's meta.json: its shard lists and token counts must match the
// shards in dir (train refuses a mix of two runs). No meta.json: nothing to check.
void check_prepared_dir(const std::string& dir);

}  // namespace rz
