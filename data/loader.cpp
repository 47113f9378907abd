// data/loader.cpp: the distributed loader (see data/loader.h for the contract).
//
// Terms:
//   window   (T+1) consecutive tokens of one shard starting at a multiple of T; shard s with
//            n_s tokens holds floor((n_s - 1) / T) of them. Windows are numbered globally,
//            shard by shard in file order: W windows in all.
//   epoch e  a permutation perm_e of 0..W-1: Fisher-Yates driven by Xoshiro256(seed, e)
//            (identity when shuffle is off).
//   share    rank r takes perm_e[r], perm_e[r+N], perm_e[r+2N], ...: the first floor(W/N) of
//            those, so every rank gets the same number and they stay in step. A batch is B
//            consecutive windows of the share; when fewer than B remain the rank moves on
//            to epoch e+1. Per epoch W - N*B*batches_per_epoch windows are skipped (none when
//            N*B divides W), a different set each epoch when shuffling.
// The state (epoch, next permutation index) is all a resume needs: the permutation is
// recomputed from (seed, epoch).
#include "data/loader.h"

#include <sys/stat.h>

#include <algorithm>

#include "base/check.h"
#include "base/memory.h"
#include "base/file.h"
#include "data/rng.h"
#include "data/shard.h"

namespace rz {

std::vector<std::string> expand_shard_pattern(const std::string& pattern) {
  std::vector<std::string> files;
  size_t start = 0;
  while (start <= pattern.size()) {
    size_t comma = pattern.find(',', start);
    if (comma == std::string::npos) comma = pattern.size();
    std::string item = pattern.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    if (has_glob_wildcard(item)) {
      for (std::string& f : glob_paths(item, "data pattern")) files.push_back(std::move(f));
    } else {
      struct stat st;
      RZ_CHECK(::stat(item.c_str(), &st) == 0, "data pattern '%s': no such file %s", pattern.c_str(),
               item.c_str());
      files.push_back(item);
    }
  }
  RZ_CHECK(!files.empty(), "data pattern '%s' matches no shard files", pattern.c_str());
  return files;
}

struct DataLoader::Impl {
  std::string pattern;
  int B, T, rank, nranks;
  uint64_t seed;
  bool shuffle;
  int vocab_bound = 65536;
  std::vector<std::string> files;
  std::vector<std::unique_ptr<ShardReader>> shards;
  std::vector<uint64_t> first_window;  // (shards + 1) global index of each shard's window 0
  uint64_t W = 0, per_rank = 0, tokens = 0;
  LoaderState st;
  uint64_t perm_epoch = ~0ull;
  std::vector<uint32_t> perm;  // (W) when shuffling

  void make_perm(uint64_t epoch) {
    if (!shuffle || perm_epoch == epoch) return;
    resize_or_fail(perm, W, "the data order (one uint32 per window)");
    for (uint64_t i = 0; i < W; i++) perm[i] = static_cast<uint32_t>(i);
    Xoshiro256 rng(seed, epoch);
    for (uint64_t i = W - 1; i > 0; i--) std::swap(perm[i], perm[rng.below(i + 1)]);
    perm_epoch = epoch;
  }

  // Copies window w's (T+1) tokens into inputs (T) and targets (T).
  void read_window(uint64_t w, int* inputs, int* targets) const {
    size_t s = static_cast<size_t>(std::upper_bound(first_window.begin(), first_window.end(), w) -
                                   first_window.begin()) - 1;
    uint64_t start = (w - first_window[s]) * static_cast<uint64_t>(T);
    const uint16_t* tok = shards[s]->tokens() + start;
    for (int t = 0; t <= T; t++) {
      int id = tok[t];
      RZ_CHECK(id < vocab_bound, "%s: token id %d at position %llu is outside the tokenizer's vocab [0, %d)",
               shards[s]->path().c_str(), id, static_cast<unsigned long long>(start + t), vocab_bound);
      if (t < T) inputs[t] = id;
      if (t > 0) targets[t - 1] = id;
    }
  }
};

DataLoader::DataLoader(const std::string& pattern, int B, int T, int rank, int nranks, uint64_t seed,
                       bool shuffle)
    : impl_(std::make_unique<Impl>()) {
  RZ_CHECK(B >= 1 && T >= 1, "data loader: batch size B=%d and sequence length T=%d must be >= 1", B, T);
  RZ_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "data loader: rank %d outside [0, %d)", rank, nranks);
  Impl& m = *impl_;
  m.pattern = pattern;
  m.B = B;
  m.T = T;
  m.rank = rank;
  m.nranks = nranks;
  m.seed = seed;
  m.shuffle = shuffle;
  m.files = expand_shard_pattern(pattern);
  m.first_window.push_back(0);
  for (const auto& f : m.files) {
    m.shards.push_back(std::make_unique<ShardReader>(f));
    uint64_t n = m.shards.back()->count();
    m.tokens += n;
    m.W += n >= 1 ? (n - 1) / static_cast<uint64_t>(T) : 0;
    m.first_window.push_back(m.W);
  }
  RZ_CHECK(m.W < (1ull << 32), "data pattern '%s': %llu windows; at most 2^32 per loader", pattern.c_str(),
           static_cast<unsigned long long>(m.W));
  m.per_rank = m.W / static_cast<uint64_t>(nranks);
  RZ_CHECK(m.per_rank >= static_cast<uint64_t>(B),
           "data pattern '%s': %llu tokens make %llu windows of T+1=%d tokens; %d ranks x B=%d need at "
           "least %llu",
           pattern.c_str(), static_cast<unsigned long long>(m.tokens), static_cast<unsigned long long>(m.W),
           T + 1, nranks, B, static_cast<unsigned long long>(nranks) * B);
  reset();
}

DataLoader::~DataLoader() = default;

void DataLoader::set_vocab_bound(int vocab_size) {
  RZ_CHECK(vocab_size >= 1, "data loader: vocab bound %d must be >= 1", vocab_size);
  impl_->vocab_bound = vocab_size;
  // Checked up front, at memory speed, so a bad id stops the run before step 1 rather
  // than whenever its window happens to be drawn.
  if (vocab_size >= 65536) return;
  for (const auto& sh : impl_->shards) {
    const uint16_t* t = sh->tokens();
    const uint64_t n = sh->count();
    uint16_t hi = 0;
    for (uint64_t i = 0; i < n; ++i) hi = std::max(hi, t[i]);
    if (hi < vocab_size) continue;
    uint64_t at = 0;
    while (t[at] < vocab_size) ++at;
    RZ_FAIL("%s: token id %d at position %llu is outside the tokenizer's vocab [0, %d)", sh->path().c_str(),
            static_cast<int>(t[at]), static_cast<unsigned long long>(at), vocab_size);
  }
}

void DataLoader::next_batch(int* inputs, int* targets) {
  Impl& m = *impl_;
  uint64_t N = static_cast<uint64_t>(m.nranks);
  // Index j of this rank's share is permutation index rank + j*N.
  uint64_t j = (m.st.next_window - static_cast<uint64_t>(m.rank)) / N;
  if (j + static_cast<uint64_t>(m.B) > m.per_rank) {
    m.st.epoch++;
    m.st.next_window = static_cast<uint64_t>(m.rank);
    j = 0;
  }
  m.make_perm(m.st.epoch);
  for (int b = 0; b < m.B; b++) {
    uint64_t idx = static_cast<uint64_t>(m.rank) + (j + b) * N;
    uint64_t w = m.shuffle ? m.perm[idx] : idx;
    m.read_window(w, inputs + static_cast<size_t>(b) * m.T, targets + static_cast<size_t>(b) * m.T);
  }
  m.st.next_window = static_cast<uint64_t>(m.rank) + (j + m.B) * N;
}

LoaderState DataLoader::state() const { return impl_->st; }

void DataLoader::restore(const LoaderState& s) {
  const Impl& m = *impl_;
  uint64_t N = static_cast<uint64_t>(m.nranks);
  RZ_CHECK(s.next_window % N == static_cast<uint64_t>(m.rank) && (s.next_window - m.rank) / N <= m.per_rank,
           "data loader '%s': saved position %llu does not belong to rank %d of %d with %llu windows "
           "(resumed with another world size or data?)",
           m.pattern.c_str(), static_cast<unsigned long long>(s.next_window), m.rank, m.nranks,
           static_cast<unsigned long long>(m.W));
  impl_->st = s;
}

void DataLoader::reset() { impl_->st = LoaderState{0, static_cast<uint64_t>(impl_->rank)}; }

uint64_t DataLoader::num_windows() const { return impl_->W; }
uint64_t DataLoader::batches_per_epoch() const { return impl_->per_rank / static_cast<uint64_t>(impl_->B); }
uint64_t DataLoader::num_tokens() const { return impl_->tokens; }
const std::vector<std::string>& DataLoader::files() const { return impl_->files; }

}  // namespace rz
