// Saving and loading a checkpoint go chunk by chunk: the memory a rank holds beyond what
// its strategy keeps stays within about one bucket while it writes its rank file and
// model.bin, and while it reads its part back (re-sharded onto another rank count). Both
// the tracker (MemTag buffers) and this binary's heap (every operator new: std::vector and
// friends, which the tracker does not see) are counted, so a full-size temporary of
// either kind fails the test. And what is read back is what was saved.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <thread>

#include "base/memory.h"
#include "comm/factory.h"
#include "model/gpt2.h"
#include "model/llmc_file.h"
#include "train/checkpoint.h"
#include "train/strategy_checkpoint.h"
#include "zero/strategy.h"

namespace {

// Live and peak bytes of operator new in this process (a size header before each block).
std::atomic<size_t> g_heap_live{0}, g_heap_peak{0};

// Under AddressSanitizer the runtime owns operator new / delete (blocks from its own
// allocator reached the replaced delete, which then read a header that was not there), so
// there only the tracker is counted; the normal build counts both.
#if !defined(__SANITIZE_ADDRESS__)
void* counted_alloc(size_t n) {
  void* p = std::malloc(n + 16);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const size_t now = g_heap_live.fetch_add(n) + n;
  size_t peak = g_heap_peak.load();
  while (now > peak && !g_heap_peak.compare_exchange_weak(peak, now)) {
  }
  return static_cast<char*>(p) + 16;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  char* q = static_cast<char*>(p) - 16;
  g_heap_live.fetch_sub(*reinterpret_cast<size_t*>(q));
  std::free(q);
}
#endif

}  // namespace

#if !defined(__SANITIZE_ADDRESS__)
void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
#endif

namespace fs = std::filesystem;
using namespace rz;

namespace {

// Bytes held (tracker + heap) since the last start(), above what was held at start().
struct Excess {
  size_t tracked0 = 0, heap0 = 0;
  void start() {
    MemoryTracker::global().reset_peaks();
    tracked0 = MemoryTracker::global().current_total();
    heap0 = g_heap_live.load();
    g_heap_peak.store(heap0);
  }
  size_t peak() const {
    return (MemoryTracker::global().peak_total() - tracked0) + (g_heap_peak.load() - heap0);
  }
};

GPT2Config shape() {
  GPT2Config cfg = model_preset("d4");  // C256, here L1: 0.9M parameters
  cfg.num_layers = 1;
  cfg.vocab_size = 257;
  cfg.max_seq_len = 64;
  finalize_config(cfg);
  return cfg;
}

constexpr double kBucketMb = 1.0 / 16;  // 64 KiB chunks of fp32

struct Ranks {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<GPT2>> models;
  std::vector<std::unique_ptr<Strategy>> strategies;
  Ranks(int n, StrategyKind kind, Precision prec, uint64_t seed) {
    CommOptions co;
    co.transport = CommTransport::thread;
    co.timeout_s = 60.0;
    comms = make_thread_communicators(n, co);
    StrategyOptions so;
    so.kind = kind;
    so.bucket_mb = kBucketMb;
    for (int r = 0; r < n; ++r) {
      models.push_back(std::make_unique<GPT2>(shape(), ModelOptions{prec}));
      models.back()->init_random(seed);
      strategies.push_back(make_strategy(*models.back(), *comms[static_cast<size_t>(r)], so));
    }
  }
  // fn(rank) on a thread per rank (collectives need them all), errors rethrown.
  template <typename Fn>
  void on_threads(Fn fn) {
    std::vector<std::exception_ptr> errors(comms.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          fn(static_cast<int>(r));
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
};

// One training step on every rank, so that m and v are not zero.
void train_one_step(Ranks& rk) {
  rk.on_threads([&](int r) {
    GPT2& model = *rk.models[static_cast<size_t>(r)];
    Strategy& st = *rk.strategies[static_cast<size_t>(r)];
    std::vector<int> in(8), tg(8);
    for (int t = 0; t < 8; ++t) {
      in[t] = (r * 31 + t * 7) % 257;
      tg[t] = (r * 17 + t * 5 + 1) % 257;
    }
    model.forward(in.data(), tg.data(), 1, 8);
    model.backward(st.begin_micro_step(0, 1), 1.0f);
    st.end_micro_step();
    st.step(1e-3f);
  });
}

}  // namespace

TEST_CASE("saving and loading a checkpoint hold at most about one bucket beyond the strategy's state") {
  const GPT2Config cfg = shape();
  const size_t total = build_param_layout(cfg).total;
  const fs::path root = fs::temp_directory_path() / ("rz_test_ckpt_mem_" + std::to_string(::getpid()));
  for (StrategyKind kind : {StrategyKind::ddp, StrategyKind::zero1, StrategyKind::zero2, StrategyKind::zero3}) {
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
      INFO(strategy_name(kind) << " " << precision_name(prec));
      const fs::path dir = root / (std::string(strategy_name(kind)) + "_" + precision_name(prec));
      fs::remove_all(dir);
      fs::create_directories(dir);

      // Save on 2 ranks.
      Ranks two(2, kind, prec, 7);
      train_one_step(two);
      const size_t chunk_bytes = two.strategies[0]->checkpoint_state().state_chunk_elems() * sizeof(float);
      // One chunk of scratch per rank plus the file code's small fixed buffers; a full-size
      // fp32 copy of the parameters (or of one rank's optimizer state) is far above it.
      const size_t per_rank = chunk_bytes + (size_t{128} << 10);
      REQUIRE(per_rank * 4 < total * sizeof(float) / 2);
      Excess ex;
      size_t save_excess = 0;
      two.on_threads([&](int r) {
        Communicator& comm = *two.comms[static_cast<size_t>(r)];
        comm.barrier();
        if (r == 0) ex.start();
        comm.barrier();
        RankState header;
        header.rank = r;
        header.world = 2;
        header.step = 1;
        header.layout_total = total;
        save_strategy_state((dir / rank_state_name(r)).string(), *two.strategies[static_cast<size_t>(r)], header);
        const std::string err = save_model_file(r == 0 ? dir.string() : std::string(),
                                                *two.strategies[static_cast<size_t>(r)], cfg, prec);
        CHECK(err.empty());
        comm.barrier();
        if (r == 0) save_excess = ex.peak();
      });
      write_manifest(dir.string(), 1, 2, strategy_name(kind), precision_name(prec));
      CHECK(save_excess <= 2 * per_rank);  // two ranks share this process
      std::printf("%s %s save: %zu bytes beyond the state (2 ranks; bound %zu; full fp32 params %zu)\n",
                  strategy_name(kind), precision_name(prec), save_excess, 2 * per_rank, total * sizeof(float));

      // model.bin is the llm.c file of the parameters, as before (read back whole here).
      std::vector<float> params(total);
      two.on_threads([&](int r) { two.strategies[static_cast<size_t>(r)]->checkpoint_state().params_f32(r == 0 ? params.data() : nullptr); });
      const ModelFile mf = read_model_file((dir / "model.bin").string());
      CHECK((mf.params == params));  // (parenthesised: Catch would print 3M floats)

      // The saved state, assembled here to check what is read back (not measured).
      std::vector<float> full[3] = {std::vector<float>(total), std::vector<float>(total), std::vector<float>(total)};
      for (int r = 0; r < 2; ++r) {
        const RankState s = read_rank_state((dir / rank_state_name(r)).string());
        size_t k = 0;
        for (auto [b, e] : s.ranges)
          for (uint64_t i = b; i < e; ++i, ++k) {
            full[0][i] = s.master[k];
            full[1][i] = s.m[k];
            full[2][i] = s.v[k];
          }
      }

      // Load on 3 ranks (re-sharded), one rank at a time: nothing collective.
      Ranks three(3, kind, prec, 99);
      for (int r = 0; r < 3; ++r) {
        Strategy& st = *three.strategies[static_cast<size_t>(r)];
        ex.start();
        const LoadedCheckpoint ckr = load_checkpoint(dir.string(), total);
        restore_strategy_state(ckr, st);
        const size_t load_excess = ex.peak();
        CHECK(load_excess <= per_rank);
        std::printf("%s %s load rank %d of 3: %zu bytes beyond the state (bound %zu)\n", strategy_name(kind),
                    precision_name(prec), r, load_excess, per_rank);
        CHECK(st.checkpoint_state().optimizer_step() == 1);
        std::vector<float> master, m, v;
        st.checkpoint_state().get_optimizer_state(master, m, v);
        size_t k = 0;
        bool same = true;
        for (auto [b, e] : st.checkpoint_state().owned_ranges())
          for (size_t i = b; i < e; ++i, ++k)
            same = same && master[k] == full[0][i] && m[k] == full[1][i] && v[k] == full[2][i];
        CHECK(same);
        CHECK(k == master.size());
      }
      // Every new rank's parameters: the saved master weights (rounded to bf16 in bf16).
      std::vector<std::vector<float>> got(3, std::vector<float>(total));
      three.on_threads([&](int r) { three.strategies[static_cast<size_t>(r)]->checkpoint_state().params_f32(got[static_cast<size_t>(r)].data()); });
      for (int r = 0; r < 3; ++r) CHECK((got[static_cast<size_t>(r)] == params));
      fs::remove_all(dir);
    }
  }
  fs::remove_all(root);
}
