// Tests of data/loader with shards holding tokens 0..n-1, so every window is known by hand:
// window w of a single shard is tokens w*T .. w*T+T.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>

#include "base/check.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data_test_util.h"

using namespace rz;
using rz::testing::ScratchDir;

namespace {

// A shard with tokens first, first+1, ..., first+n-1.
void write_iota(const std::string& path, int first, int n) {
  std::vector<int> t(n);
  std::iota(t.begin(), t.end(), first);
  write_shard(path, t.data(), t.size());
}

// The first token of each window in a batch (inputs[b*T]), after checking that inputs and
// targets are consecutive tokens of one window.
std::vector<int> batch_starts(DataLoader& dl, int B, int T) {
  std::vector<int> in(B * T), tg(B * T);
  dl.next_batch(in.data(), tg.data());
  std::vector<int> starts;
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      REQUIRE(in[b * T + t] == in[b * T] + t);
      REQUIRE(tg[b * T + t] == in[b * T] + t + 1);
    }
    starts.push_back(in[b * T]);
  }
  return starts;
}

}  // namespace

TEST_CASE("validation order: windows at stride T in file order, across shards") {
  ScratchDir dir;
  // Shard a: tokens 0..20 (21 tokens, T=4 -> windows at 0,4,8,12,16: (21-1)/4 = 5).
  // Shard b: tokens 1000..1009 (10 tokens -> windows at 1000,1004: (10-1)/4 = 2).
  write_iota(dir.file("val_000000.bin"), 0, 21);
  write_iota(dir.file("val_000001.bin"), 1000, 10);
  DataLoader dl(dir.file("val_*.bin"), 2, 4, 0, 1, 0, /*shuffle=*/false);
  REQUIRE(dl.num_windows() == 7);
  REQUIRE(dl.num_tokens() == 31);
  REQUIRE(dl.batches_per_epoch() == 3);
  REQUIRE(dl.files().size() == 2);
  REQUIRE(batch_starts(dl, 2, 4) == std::vector<int>{0, 4});
  REQUIRE(batch_starts(dl, 2, 4) == std::vector<int>{8, 12});
  REQUIRE(batch_starts(dl, 2, 4) == std::vector<int>{16, 1000});
  // Window 1004 is left over (7 windows, batches of 2): the next batch starts epoch 1.
  REQUIRE(batch_starts(dl, 2, 4) == std::vector<int>{0, 4});
  REQUIRE(dl.state().epoch == 1);
  dl.reset();
  REQUIRE(dl.state().epoch == 0);
  REQUIRE(batch_starts(dl, 2, 4) == std::vector<int>{0, 4});
}

TEST_CASE("validation order with 2 ranks: rank r takes windows r, r+2, ...") {
  ScratchDir dir;
  write_iota(dir.file("v.bin"), 0, 33);  // T=4: 8 windows at 0,4,...,28
  DataLoader r0(dir.file("v.bin"), 2, 4, 0, 2, 0, false);
  DataLoader r1(dir.file("v.bin"), 2, 4, 1, 2, 0, false);
  REQUIRE(batch_starts(r0, 2, 4) == std::vector<int>{0, 8});
  REQUIRE(batch_starts(r1, 2, 4) == std::vector<int>{4, 12});
  REQUIRE(batch_starts(r0, 2, 4) == std::vector<int>{16, 24});
  REQUIRE(batch_starts(r1, 2, 4) == std::vector<int>{20, 28});
}

TEST_CASE("a comma-separated list keeps its order") {
  ScratchDir dir;
  write_iota(dir.file("a.bin"), 0, 9);
  write_iota(dir.file("b.bin"), 500, 9);
  DataLoader dl(dir.file("b.bin") + "," + dir.file("a.bin"), 1, 4, 0, 1, 0, false);
  REQUIRE(batch_starts(dl, 1, 4) == std::vector<int>{500});
  REQUIRE(batch_starts(dl, 1, 4) == std::vector<int>{504});
  REQUIRE(batch_starts(dl, 1, 4) == std::vector<int>{0});
}

TEST_CASE("shuffled epochs: ranks are disjoint and cover every window, N = 1..8") {
  ScratchDir dir;
  const int T = 3, B = 2;
  // Windows: shard 0 holds 2*3*4*5*7 = 840 tokens + 1 -> 280 windows, shard 1 holds 561
  // tokens -> 560/3 = 186 windows (start at 10000). 466 windows in all.
  write_iota(dir.file("train_000000.bin"), 0, 841);
  write_iota(dir.file("train_000001.bin"), 10000, 561);
  std::set<int> all_windows;
  for (int w = 0; w < 280; w++) all_windows.insert(w * T);
  for (int w = 0; w < 186; w++) all_windows.insert(10000 + w * T);
  REQUIRE(all_windows.size() == 466);

  for (int N = 1; N <= 8; N++) {
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
      std::multiset<int> seen;
      uint64_t per_rank_batches = 0;
      for (int r = 0; r < N; r++) {
        DataLoader dl(dir.file("train_*.bin"), B, T, r, N, 42);
        REQUIRE(dl.num_windows() == 466);
        per_rank_batches = dl.batches_per_epoch();
        REQUIRE(per_rank_batches == static_cast<uint64_t>((466 / N) / B));
        dl.restore(LoaderState{epoch, static_cast<uint64_t>(r)});
        for (uint64_t k = 0; k < per_rank_batches; k++)
          for (int s : batch_starts(dl, B, T)) seen.insert(s);
        REQUIRE(dl.state().epoch == epoch);
      }
      // Disjoint: no window twice. Covered: every window but the W - N*B*batches remainder.
      std::set<int> unique(seen.begin(), seen.end());
      REQUIRE(unique.size() == seen.size());
      REQUIRE(seen.size() == static_cast<uint64_t>(N * B) * per_rank_batches);
      for (int s : unique) REQUIRE(all_windows.count(s) == 1);
      if (466 % (N * B) == 0) REQUIRE(unique == all_windows);
    }
  }
}

TEST_CASE("the order is a function of (seed, epoch) alone") {
  ScratchDir dir;
  write_iota(dir.file("t.bin"), 0, 4001);  // T=4: 1000 windows
  auto epoch_order = [&](uint64_t seed, uint64_t epoch) {
    DataLoader dl(dir.file("t.bin"), 10, 4, 0, 1, seed);
    dl.restore(LoaderState{epoch, 0});
    std::vector<int> all;
    for (int k = 0; k < 100; k++)
      for (int s : batch_starts(dl, 10, 4)) all.push_back(s);
    return all;
  };
  std::vector<int> a = epoch_order(7, 0);
  REQUIRE(a == epoch_order(7, 0));
  REQUIRE(a != epoch_order(8, 0));
  REQUIRE(a != epoch_order(7, 1));
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int w = 0; w < 1000; w++) REQUIRE(sorted[w] == 4 * w);  // a permutation of all windows
  REQUIRE(a != sorted);                                         // and not the identity
}

TEST_CASE("restoring a saved position gives the same continuation") {
  ScratchDir dir;
  write_iota(dir.file("t.bin"), 0, 2001);  // T=8: 250 windows
  const int B = 3, T = 8, N = 3;
  for (int r = 0; r < N; r++) {
    DataLoader a(dir.file("t.bin"), B, T, r, N, 99);
    for (int k = 0; k < 40; k++) batch_starts(a, B, T);  // well into epoch 1 (27 batches/epoch)
    LoaderState saved = a.state();
    REQUIRE(saved.epoch == 1);
    std::vector<std::vector<int>> expect;
    for (int k = 0; k < 30; k++) expect.push_back(batch_starts(a, B, T));

    DataLoader b(dir.file("t.bin"), B, T, r, N, 99);
    b.restore(saved);
    for (int k = 0; k < 30; k++) REQUIRE(batch_starts(b, B, T) == expect[k]);
    REQUIRE(b.state().epoch == a.state().epoch);
    REQUIRE(b.state().next_window == a.state().next_window);
  }
}

TEST_CASE("loader errors name the pattern or the shard") {
  ScratchDir dir;
  write_iota(dir.file("t.bin"), 0, 41);  // T=4: 10 windows
  REQUIRE_THROWS_WITH(DataLoader(dir.file("nothing_*.bin"), 1, 4, 0, 1, 0),
                      Catch::Contains("nothing_*.bin") && Catch::Contains("matches no shard"));
  REQUIRE_THROWS_WITH(DataLoader(dir.file("t.bin"), 2, 4, 0, 8, 0),
                      Catch::Contains("10 windows") && Catch::Contains("need at least 16"));
  REQUIRE_THROWS_WITH(DataLoader(dir.file("t.bin"), 1, 4, 3, 2, 0), Catch::Contains("rank 3"));
  rz::testing::write_bytes(dir.file("bad.bin"), "not a shard");
  REQUIRE_THROWS_WITH(DataLoader(dir.file("bad.bin"), 1, 4, 0, 1, 0), Catch::Contains("bad.bin"));

  DataLoader dl(dir.file("t.bin"), 1, 4, 1, 2, 0);
  REQUIRE_THROWS_WITH(dl.restore(LoaderState{0, 2}), Catch::Contains("does not belong to rank 1"));
}

TEST_CASE("a token id at or above the vocab bound is an error naming the shard") {
  ScratchDir dir;
  std::vector<int> t = {1, 2, 3, 4, 300, 5, 6, 7, 8};  // T=4: windows [1..300], [300..8]
  write_shard(dir.file("v.bin"), t.data(), t.size());
  DataLoader dl(dir.file("v.bin"), 1, 4, 0, 1, 0, false);
  // Caught when the bound is set (before step 1), not when the window is drawn (issue 11).
  REQUIRE_THROWS_WITH(dl.set_vocab_bound(257), Catch::Contains("v.bin") && Catch::Contains("token id 300 at position 4") &&
                                                   Catch::Contains("[0, 257)"));
  // A bad id past the last whole window (which no window serves) is found too.
  std::vector<int> tail = {1, 2, 3, 4, 5, 6, 7, 8, 9, 999};
  write_shard(dir.file("tail.bin"), tail.data(), tail.size());
  DataLoader dt(dir.file("tail.bin"), 1, 4, 0, 1, 0, false);
  REQUIRE_THROWS_WITH(dt.set_vocab_bound(257), Catch::Contains("token id 999 at position 9"));
  std::vector<int> in(4), tg(4);
  DataLoader ok(dir.file("v.bin"), 1, 4, 0, 1, 0, false);
  ok.set_vocab_bound(301);
  ok.next_batch(in.data(), tg.data());
  REQUIRE(tg[3] == 300);
}
