// comm/debug/flight_recorder.cpp: the ring buffer, its JSON record, and the process-wide thread
// that serves SIGUSR1 and the watchdog (see flight_recorder.h).
#include "comm/debug/flight_recorder.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/clock.h"
#include "base/file.h"
#include "base/printable.h"
#include "base/trace.h"
#include "comm/options.h"

namespace rz {

namespace {

thread_local const char* t_purpose = nullptr;
thread_local int64_t t_step = -1;

// Set by the SIGUSR1 handler, read by the dump thread: a lock-free atomic, which a signal
// handler may store to and another thread may read (sig_atomic_t is only for one thread).
std::atomic<int> g_dump_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the SIGUSR1 flag must be lock-free");
void on_sigusr1(int) { g_dump_requested.store(1, std::memory_order_relaxed); }

// The process-wide dump thread: wakes every 250 ms, dumps every live recorder on SIGUSR1,
// and each one whose pending collective made no progress for its watchdog time.
struct Registry {
  struct Watch {
    uint64_t activity = ~0ull;
    std::chrono::steady_clock::time_point since;
    bool dumped = false;  // for this stall
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<FlightRecorder*, Watch> live;
  std::thread thread;
  bool stop = false;
  bool handler_installed = false;
};

Registry& registry();

// A child of fork() has none of the parent's threads: it forgets the dump thread and the
// parent's recorders (taken under the lock, so the registry is consistent at the fork).
void before_fork() { registry().mu.lock(); }
void after_fork_parent() { registry().mu.unlock(); }
void after_fork_child() {
  Registry& reg = registry();
  reg.live.clear();
  new (&reg.thread) std::thread();  // the old handle names a thread this process does not have
  reg.stop = false;
  reg.mu.unlock();
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: recorders may outlive static destruction order
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return reg;
  }();
  return *r;
}

void serve(Registry& reg) {
  std::unique_lock<std::mutex> l(reg.mu);
  while (!reg.stop) {
    reg.cv.wait_for(l, std::chrono::milliseconds(250));
    if (reg.stop) break;
    const bool signalled = g_dump_requested.exchange(0, std::memory_order_relaxed) != 0;
    const auto now = std::chrono::steady_clock::now();
    for (auto& [rec, w] : reg.live) {
      if (signalled) {
        rec->dump("signal");
        continue;
      }
      if (rec->watchdog_s() <= 0) continue;
      const uint64_t a = rec->activity();
      if (a != w.activity || !rec->pending()) {
        w.activity = a;
        w.since = now;
        w.dumped = false;
        continue;
      }
      if (!w.dumped && std::chrono::duration<double>(now - w.since).count() >= rec->watchdog_s()) {
        w.dumped = true;
        rec->dump("watchdog");
      }
    }
  }
}

void register_recorder(FlightRecorder* rec) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> l(reg.mu);
  if (!reg.handler_installed) {
    // SIGUSR1 asks for a dump, unless the program has its own use for it.
    struct sigaction old {};
    if (sigaction(SIGUSR1, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction sa {};
      sa.sa_handler = on_sigusr1;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(SIGUSR1, &sa, nullptr);
    }
    reg.handler_installed = true;
  }
  reg.live[rec] = Registry::Watch{};
  if (!reg.thread.joinable()) {
    reg.stop = false;
    reg.thread = std::thread([&reg] { serve(reg); });
  }
}

void unregister_recorder(FlightRecorder* rec) {
  Registry& reg = registry();
  std::thread done;
  {
    std::lock_guard<std::mutex> l(reg.mu);
    reg.live.erase(rec);
    if (reg.live.empty() && reg.thread.joinable()) {
      reg.stop = true;
      reg.cv.notify_all();
      done = std::move(reg.thread);
    }
  }
  if (done.joinable()) done.join();
}

std::string job_id() {
  auto env = [](const char* n) -> std::string {
    const char* v = std::getenv(n);
    return v != nullptr ? v : "";
  };
  if (std::string n = env("RINGZERO_JOB_NONCE"); !n.empty()) return n.substr(0, 16);
  if (std::string s = env("SLURM_JOB_ID"); !s.empty()) return "slurm " + s;
  if (std::string p = env("MASTER_PORT"); !p.empty()) return env("MASTER_ADDR") + ":" + p;
  if (std::string o = env("OMPI_MCA_ess_base_jobid"); !o.empty()) return "mpi " + o;
  return strfmt("pid %d", static_cast<int>(getppid()));
}

std::string hostname() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

const char* dtype_of(uint32_t d) { return dtype_name(static_cast<DType>((d >> 4) & 0xf)); }

}  // namespace

CommPurpose::CommPurpose(const char* what) : prev_(t_purpose) { t_purpose = what; }
CommPurpose::~CommPurpose() { t_purpose = prev_; }
const char* comm_purpose() { return t_purpose; }

void set_flight_step(int64_t step) { t_step = step; }
int64_t flight_step() { return t_step; }

const char* flight_state_name(FlightState s) {
  switch (s) {
    case FlightState::issued: return "issued";
    case FlightState::started: return "started";
    case FlightState::done: return "done";
    case FlightState::failed: return "failed";
  }
  return "?";
}

int64_t FlightRecorder::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

FlightRecorder::~FlightRecorder() {
  if (registered_) unregister_recorder(this);
}

void FlightRecorder::configure(int rank, int nranks, const std::string& backend, const CommOptions& opts) {
  rank_ = rank;
  nranks_ = nranks;
  backend_ = backend;
  transport_ = backend;
  dir_ = opts.flight_dir;
  watchdog_s_ = opts.flight_watchdog_s;
  job_ = job_id();
  RZ_CHECK(opts.flight_entries <= (1u << 24), "flight recorder: expected at most %u entries, found %zu", 1u << 24,
           opts.flight_entries);
  if (opts.flight_entries > 0) {
    uint64_t k = 1;
    while (k < opts.flight_entries) k <<= 1;
    entries_ = std::make_unique<Entry[]>(k);
    mask_ = k - 1;
  }
  steady0_ns_ = now_ns();
  wall0_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch()).count();
  if (!registered_ && (enabled() || watchdog_s_ > 0)) {
    register_recorder(this);
    registered_ = true;
  }
}

uint64_t FlightRecorder::issue(CollectiveKind kind, DType dtype, uint64_t count, int op, int root,
                               int64_t t_issue_ns) {
  const uint64_t seq = next_seq_.load(std::memory_order_relaxed) + 1;
  next_seq_.store(seq, std::memory_order_relaxed);
  Entry* e = slot(seq);
  if (e == nullptr) return seq;
  // Seqlock: readers see seq change before and after a rewrite of the slot. The field
  // stores are release stores (plain stores on x86), so none moves before seq's 0.
  e->seq.store(0, std::memory_order_relaxed);
  e->count.store(count, std::memory_order_release);
  e->t_issue.store(t_issue_ns, std::memory_order_release);
  e->t_start.store(0, std::memory_order_release);
  e->t_done.store(0, std::memory_order_release);
  e->step.store(t_step >= 0 && t_step <= INT32_MAX ? static_cast<int32_t>(t_step) : -1, std::memory_order_release);
  const uint32_t root_bits = root >= 0 && root < 0xfffe ? static_cast<uint32_t>(root + 1) : 0u;
  e->desc.store(static_cast<uint32_t>(kind) | static_cast<uint32_t>(dtype) << 4 | static_cast<uint32_t>(op + 1) << 8 |
                    root_bits << 16,
                std::memory_order_release);
  e->bucket.store(trace::bucket(), std::memory_order_release);
  e->progress.store(0, std::memory_order_release);
  e->purpose.store(t_purpose, std::memory_order_release);
  e->seq.store(seq, std::memory_order_release);
  return seq;
}

FlightRecorder::Entry* FlightRecorder::live(uint64_t seq) {
  Entry* e = slot(seq);
  return e != nullptr && e->seq.load(std::memory_order_relaxed) == seq ? e : nullptr;
}

void FlightRecorder::set_state(Entry* e, FlightState s) {
  const uint32_t d = e->desc.load(std::memory_order_relaxed);
  e->desc.store((d & 0xffff0fffu) | static_cast<uint32_t>(s) << 12, std::memory_order_release);
}

void FlightRecorder::start(uint64_t seq, int64_t t_ns) {
  Entry* e = live(seq);
  if (e == nullptr) return;
  if (e->t_issue.load(std::memory_order_relaxed) == 0) e->t_issue.store(t_ns, std::memory_order_relaxed);
  e->t_start.store(t_ns, std::memory_order_relaxed);
  set_state(e, FlightState::started);
}

std::atomic<int32_t>* FlightRecorder::progress_word(uint64_t seq) {
  Entry* e = live(seq);
  return e != nullptr ? &e->progress : nullptr;
}

void FlightRecorder::done(uint64_t seq, int64_t t_ns) {
  done_seq_.store(seq, std::memory_order_relaxed);
  Entry* e = live(seq);
  if (e == nullptr) return;
  e->t_done.store(t_ns, std::memory_order_relaxed);
  set_state(e, FlightState::done);
}

uint64_t FlightRecorder::activity() const {
  const uint64_t d = done_seq_.load(std::memory_order_relaxed);
  uint64_t a = d << 20;
  if (mask_ != 0) {
    const Entry& e = entries_[(d + 1) & mask_];
    if (e.seq.load(std::memory_order_acquire) == d + 1)
      a ^= static_cast<uint64_t>(e.progress.load(std::memory_order_relaxed)) << 2 ^ ((e.desc.load() >> 12) & 0xf);
  }
  return a;
}

bool FlightRecorder::pending() const { return done_seq_.load() < next_seq_.load(); }

std::string FlightRecorder::fail(uint64_t seq, const std::string& error, int peer, const FlightMismatch* mismatch) {
  if (Entry* e = live(seq)) set_state(e, FlightState::failed);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.empty()) {
      error_ = error;
      error_peer_ = peer;
      error_seq_ = seq;
      if (mismatch != nullptr) {
        has_mismatch_ = true;
        mismatch_ = *mismatch;
      }
    }
  }
  const char* reason = mismatch != nullptr                          ? "mismatch"
                       : error.find("timed out") != std::string::npos ? "timeout"
                       : peer >= 0                                     ? "peer"
                                                                       : "error";
  return dump(reason);
}

std::string FlightRecorder::where() const {
  const uint64_t issued = next_seq_.load(), d = done_seq_.load();
  auto describe = [&](uint64_t seq) -> std::string {
    const Entry* e = mask_ != 0 ? &entries_[seq & mask_] : nullptr;
    if (e == nullptr || e->seq.load(std::memory_order_acquire) != seq) return strfmt("#%llu", (unsigned long long)seq);
    const uint32_t desc = e->desc.load();
    std::string s = strfmt("%s #%llu", collective_name(static_cast<CollectiveKind>(desc & 0xf)), (unsigned long long)seq);
    std::string what;
    if (const char* p = e->purpose.load()) what = p;
    if (const int b = e->bucket.load(); b >= 0) what += strfmt("%sbucket %d", what.empty() ? "" : ", ", b);
    if (const int64_t st = e->step.load(); st >= 0) what += strfmt("%sstep %lld", what.empty() ? "" : ", ", (long long)st);
    if (!what.empty()) s += " (" + what + ")";
    const int32_t pr = e->progress.load();
    if (pr != 0 && ((desc >> 12) & 0xf) != static_cast<uint32_t>(FlightState::done))
      s += strfmt(", %s round %d of %d", collective_name(static_cast<CollectiveKind>((pr >> 16) - 1)), pr & 0xffff,
                  nranks_ - 1);
    return s;
  };
  if (issued == 0) return strfmt("rank %d: no collective issued yet", rank_);
  if (d >= issued) return strfmt("rank %d: idle; last %s done", rank_, describe(issued).c_str());
  const Entry* e = mask_ != 0 ? &entries_[(d + 1) & mask_] : nullptr;
  double waited = 0;
  if (e != nullptr && e->seq.load() == d + 1) {
    const int64_t t = e->t_start.load() != 0 ? e->t_start.load() : e->t_issue.load();
    if (t != 0) waited = static_cast<double>(now_ns() - t) * 1e-9;
  }
  std::string s = strfmt("rank %d: in %s for %.1f s", rank_, describe(d + 1).c_str(), waited);
  if (issued > d + 1) s += strfmt("; %llu more issued after it", (unsigned long long)(issued - d - 1));
  return s;
}

std::string FlightRecorder::to_json(const std::string& reason) const {
  using nlohmann::json;
  auto wall = [&](int64_t t_ns) { return static_cast<double>(wall0_us_ + (t_ns - steady0_ns_) / 1000) * 1e-6; };
  json j;
  j["format"] = "ringzero-flight/1";
  j["rank"] = rank_;
  j["world"] = nranks_;
  j["backend"] = backend_;
  j["transport"] = transport_;
  j["pid"] = static_cast<int>(getpid());
  j["host"] = hostname();
  j["job"] = job_;
  j["reason"] = reason;
  j["written_at"] = wall(now_ns());
  j["capacity"] = mask_ != 0 ? mask_ + 1 : 0;
  const uint64_t issued = next_seq_.load(), d = done_seq_.load();
  j["issued"] = issued;
  j["done"] = d;
  j["where"] = where();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.empty()) j["error"] = {{"seq", error_seq_}, {"peer", error_peer_}, {"message", error_}};
    if (has_mismatch_) {
      const FlightMismatch& m = mismatch_;
      auto side = [](int kind, int dt, uint64_t count, int op, int root) {
        json s{{"op", collective_name(static_cast<CollectiveKind>(kind))}, {"dtype", dtype_name(static_cast<DType>(dt))},
               {"count", count}};
        if (op >= 0) s["redop"] = reduce_op_name(static_cast<ReduceOp>(op));
        if (root >= 0) s["root"] = root;
        return s;
      };
      j["mismatch"] = {{"seq", m.seq},
                       {"other_rank", m.other_rank},
                       {"mine", side(m.mine_kind, m.mine_dtype, m.mine_count, m.mine_op, m.mine_root)},
                       {"theirs", side(m.theirs_kind, m.theirs_dtype, m.theirs_count, m.theirs_op, m.theirs_root)}};
    }
  }
  json entries = json::array();
  const uint64_t K = mask_ != 0 ? mask_ + 1 : 0;
  for (uint64_t seq = issued > K ? issued - K + 1 : 1; K != 0 && seq <= issued; ++seq) {
    const Entry& e = entries_[seq & mask_];
    if (e.seq.load(std::memory_order_acquire) != seq) continue;
    const uint32_t desc = e.desc.load(std::memory_order_acquire);
    const uint64_t count = e.count.load();
    const int64_t ti = e.t_issue.load(), ts = e.t_start.load(), td = e.t_done.load(), step = e.step.load();
    const int32_t root = static_cast<int32_t>(desc >> 16) - 1, bucket = e.bucket.load(), progress = e.progress.load();
    const char* purpose = e.purpose.load();  // these loads are seq_cst: none moves past the check
    if (e.seq.load() != seq) continue;        // rewritten while read
    json o{{"seq", seq},
           {"op", collective_name(static_cast<CollectiveKind>(desc & 0xf))},
           {"dtype", dtype_of(desc)},
           {"count", count},
           {"bytes", count * dtype_size(static_cast<DType>((desc >> 4) & 0xf))},
           {"state", flight_state_name(static_cast<FlightState>((desc >> 12) & 0xf))}};
    const int op = static_cast<int>((desc >> 8) & 0xf) - 1;
    if (op >= 0) o["redop"] = reduce_op_name(static_cast<ReduceOp>(op));
    if (root >= 0) o["root"] = root;
    if (purpose != nullptr) o["purpose"] = purpose;
    if (bucket >= 0) o["bucket"] = bucket;
    if (step >= 0) o["step"] = step;
    if (progress != 0) {
      o["phase"] = collective_name(static_cast<CollectiveKind>((progress >> 16) - 1));
      o["round"] = progress & 0xffff;
      o["rounds"] = nranks_ - 1;
    }
    if (ti != 0) o["t_issue"] = wall(ti);
    if (ts != 0) o["t_start"] = wall(ts);
    if (td != 0) o["t_done"] = wall(td);
    entries.push_back(std::move(o));
  }
  j["entries"] = std::move(entries);
  return j.dump(1) + "\n";
}

std::string FlightRecorder::dump(const std::string& reason) {
  std::lock_guard<std::mutex> serial(dump_mu_);
  if (dir_.empty()) {
    std::fprintf(stderr, "ringzero: %s (%s; no flight record: no --flight-dir or RINGZERO_FLIGHT_DIR)\n",
                 where().c_str(), printable(reason).c_str());
    return "";
  }
  const std::string path = (std::filesystem::path(dir_) / strfmt("rank%d.json", rank_)).string();
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    struct stat st {};
    RZ_CHECK(::stat(dir_.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "%s is not a directory", dir_.c_str());
    write_file_atomic(path, to_json(reason));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringzero: rank %d: could not write the flight record %s: %s\n", rank_, printable(path).c_str(),
                 printable(e.what()).c_str());
    return "";
  }
  // The reason may quote a peer's message: escaped (base/printable.h).
  std::fprintf(stderr, "ringzero: %s (%s; flight record %s)\n", where().c_str(), printable(reason).c_str(),
               printable(path).c_str());
  return path;
}

}  // namespace rz
