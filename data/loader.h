// data/loader.h: the distributed loader over llm.c token shards.
//
// A window is one (T+1)-token span (inputs are
// its first T tokens, targets its last T). Windows are cut from every shard at stride T
// (never crossing a shard's end). An epoch is a permutation of all windows, a
// deterministic function of (seed, epoch); rank r of N takes windows r, r+N, r+2N, ... of
// that permutation, B at a time, so ranks never share a window and together visit each
// window at most once per epoch: every rank takes the same floor(W/N) share and moves to the
// next epoch when fewer than B windows of it remain, so exactly once when N*B divides the
// window count W. The validation loader (shuffle = false) reads its shards' windows in file
// order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rz {

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t next_window = 0;  // index into this epoch's permutation of the next window this rank takes
};

// The shard files a pattern names: a glob or a comma-separated list (whose items may be
// globs), in order, globs sorted. Throws naming the pattern when nothing matches.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

class DataLoader {
 public:
  // pattern: a glob ("data/train_*.bin") or a comma-separated list of shard files.
  // Throws rz::Error naming the pattern when nothing matches, or the file when a shard is bad.
  DataLoader(const std::string& pattern, int B, int T, int rank, int nranks, uint64_t seed,
             bool shuffle = true);
  ~DataLoader();

  // inputs, targets: (B, T) each. Wraps into the next epoch when this one runs out.
  void next_batch(int* inputs, int* targets);

  LoaderState state() const;
  void restore(const LoaderState& s);
  void reset();  // back to epoch 0, window 0 (the validation loader does this per eval)

  // Every token must be < vocab_size (the tokenizer's): every shard is scanned here (one
  // pass at memory speed) and the first bad id is a rz::Error naming the shard and
  // position; next_batch checks again. Default 65536 (any uint16).
  void set_vocab_bound(int vocab_size);

  uint64_t num_windows() const;     // windows in one epoch across all ranks
  uint64_t batches_per_epoch() const;  // full (B, T) batches per rank per epoch
  uint64_t num_tokens() const;      // tokens in all shards
  const std::vector<std::string>& files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rz
