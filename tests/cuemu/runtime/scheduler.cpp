// tests/cuemu/runtime/scheduler.cpp: how the emulator runs a grid.
//
// Blocks run one after another, in blockIdx order (x fastest), on the thread that made the
// launch; the launch returns when the last block is done. Inside a block, CUDA threads run
// on fibers (fiber.h):
//   worker    a fiber runs the block's threads one after another, in threadIdx order,
//             each to its end, until one waits at a barrier; that thread keeps the fiber
//             and another fiber takes the next thread. An elementwise kernel so costs one
//             fiber per block, a kernel with __syncthreads one per thread.
//   barrier   __syncthreads waits until every thread of the block that has not returned
//             waits at one (a returned thread counts as arrived, as on sm_70 and later);
//             if they wait at different __syncthreads (file:line), the launch fails:
//             divergent __syncthreads. A warp op (__shfl_*_sync, __syncwarp) waits until
//             every lane named in its mask that has not returned waits at the same op with
//             the same mask -- the lanes of one warp of 32, nothing else; the last lane to
//             arrive computes every lane's result with PTX's arithmetic (shfl.sync: lane,
//             width, clamp) and goes on, the others resume in order.
//   order     a released thread resumes before a new one starts; otherwise threads start
//             in order. Which thread runs when is deterministic, so are the results.
//   stuck     when no thread can move and some have not returned, the launch fails with a
//             deadlock report: which threads wait at which barrier (file:line), and which
//             have returned. A shuffle that reads a lane outside its mask or a returned
//             lane (undefined on a GPU) fails the launch too.
// A failed launch abandons its fibers (their stacks are reused from the top) and sets the
// thread's last error, which CUDA_CHECK_LAUNCH turns into an error naming the kernel.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fiber.h"
#include "internal.h"

namespace cuemu {
namespace detail {

__thread ThreadCoords* t_thread = nullptr;
__thread BlockCoords* t_block = nullptr;

namespace {

constexpr size_t kFiberStackBytes = size_t(256) << 10;
constexpr unsigned kWarp = 32;

enum class State : uint8_t { unstarted, running, runnable, waiting, done };
enum class Wait : uint8_t { none, sync, warp };

struct Thread {
  ThreadCoords coords;
  State state = State::unstarted;
  Wait wait = Wait::none;
  WarpOp op = WarpOp::syncwarp;
  unsigned mask = 0;
  int b = 0, width = 32;
  uint64_t value = 0, result = 0;
  const char* file = "";
  int line = 0;
  struct Fiber* fiber = nullptr;
};

struct Fiber {
  Ctx ctx;
  bool idle = true;
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::shfl_idx: return "__shfl_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::syncwarp: return "__syncwarp";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::vote_any: return "__any_sync";
    case WarpOp::vote_all: return "__all_sync";
  }
  return "?";
}

// One OS thread's state: its fibers and the block it is running.
struct Engine {
  Ctx main;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<Fiber*> idle;
  Fiber* running = nullptr;  // the fiber executing now (null: main)

  // The launch.
  const LaunchSite* site = nullptr;
  void (*invoke)(const void*) = nullptr;
  const void* call = nullptr;
  size_t shmem = 0;
  size_t shared_limit = 0;  // static + dynamic bytes this launch may use
  std::unique_ptr<unsigned char[]> dynamic;

  // The block.
  BlockCoords block;
  std::vector<Thread> threads;
  unsigned nthreads = 0, next_unstarted = 0, live = 0, sync_waiting = 0;
  std::vector<unsigned> runnable;  // released threads, resumed from runnable_head on
  size_t runnable_head = 0;
  Thread* current = nullptr;
  // Per warp, lanes as bits: live (the lane exists and has not returned) and waiting at a
  // warp op. A warp op can only complete when every live lane of its mask waits.
  std::vector<uint32_t> warp_live, warp_waiting;
  std::vector<std::pair<void*, size_t>> shared_seen;  // static __shared__ variables this block
  size_t static_shared = 0;
  std::string fault;  // non-empty: the block stops, the launch fails with this

  ~Engine() {
    for (auto& f : fibers) ctx_free_fiber(&f->ctx);
  }
};

// The calling thread's engine, made on its first launch (a pointer in __thread storage: one
// TLS load per barrier; the thread_local owns it and frees its fibers at thread exit).
__thread Engine* t_engine = nullptr;
Engine& engine() {
  if (__builtin_expect(t_engine == nullptr, 0)) {
    thread_local std::unique_ptr<Engine> owner = std::make_unique<Engine>();
    t_engine = owner.get();
  }
  return *t_engine;
}

void worker_entry();

Fiber* take_fiber(Engine& e) {
  if (!e.idle.empty()) {
    Fiber* f = e.idle.back();
    e.idle.pop_back();
    f->idle = false;
    return f;
  }
  auto f = std::make_unique<Fiber>();
  ctx_init_fiber(&f->ctx, kFiberStackBytes, worker_entry, unsigned(e.fibers.size()));
  f->idle = false;
  e.fibers.push_back(std::move(f));
  return e.fibers.back().get();
}

// Leaves `from` for whatever can run next: a released thread, a fiber for the next thread
// to start, or main (the block is done, stuck or failed).
void switch_away(Engine& e, Ctx* from) {
  Ctx* to = &e.main;
  e.running = nullptr;
  if (e.fault.empty()) {
    if (e.runnable_head < e.runnable.size()) {
      Thread& t = e.threads[e.runnable[e.runnable_head++]];
      t.state = State::running;
      e.current = &t;
      t_thread = &t.coords;
      e.running = t.fiber;
      to = &t.fiber->ctx;
    } else if (e.next_unstarted < e.nthreads) {
      e.running = take_fiber(e);
      to = &e.running->ctx;
    }
  }
  if (to == from) return;
  ctx_switch(from, to);
}

void release(Engine& e, Thread& t, unsigned index) {
  if (t.wait == Wait::warp) e.warp_waiting[index / kWarp] &= ~(1u << (index % kWarp));
  t.wait = Wait::none;
  if (e.current == &t) return;  // the arriving thread goes on without a switch
  t.state = State::runnable;
  e.runnable.push_back(index);
}

// The thread that cannot go on (e.fault says why) leaves its fiber for main for good. Its
// frames are abandoned, never unwound: nothing on them may own memory (a std::string
// argument here would leak), so callers set e.fault themselves first.
[[noreturn]] void fail_thread(Engine& e) {
  switch_away(e, &e.running->ctx);
  std::fprintf(stderr, "cuemu: an abandoned thread was resumed\n");
  std::abort();
}

std::string where(const Thread& t) { return fmt("%s:%d", t.file, t.line); }

// Every live thread waits at a __syncthreads: release them, or fail when they wait at
// different ones.
void complete_sync(Engine& e) {
  const Thread* first = nullptr;
  for (unsigned i = 0; i < e.next_unstarted; ++i) {
    const Thread& t = e.threads[i];
    if (t.wait != Wait::sync) continue;
    if (first == nullptr) {
      first = &t;
    } else if (t.line != first->line || (t.file != first->file && std::strcmp(t.file, first->file) != 0)) {
      e.fault = fmt("divergent __syncthreads: every live thread waits at a __syncthreads, but thread %u waits at %s "
                    "and thread %u at %s (a __syncthreads in code that not every thread of the block reaches)",
                    unsigned(first - e.threads.data()), where(*first).c_str(), i, where(t).c_str());
      return;
    }
  }
  e.sync_waiting = 0;
  for (unsigned i = 0; i < e.next_unstarted; ++i)
    if (e.threads[i].wait == Wait::sync) release(e, e.threads[i], i);
}


// Tries to complete the warp op that lane `lead` waits at. True when it completed (every
// lane's result is set and the others are released); e.fault is set on a misuse.
bool try_complete_warp(Engine& e, unsigned warp, unsigned lead) {
  Thread* lanes = &e.threads[size_t(warp) * kWarp];
  const unsigned mask = lanes[lead].mask;
  const WarpOp op = lanes[lead].op;
  const uint32_t live = e.warp_live[warp];
  const uint32_t members = mask & live;  // named and not returned (a lane not started yet is live)
  if ((members & ~e.warp_waiting[warp]) != 0) return false;  // a member is not at a warp op yet
  for (uint32_t bits = members; bits != 0; bits &= bits - 1) {
    const Thread& t = lanes[__builtin_ctz(bits)];
    if (t.op != op || t.mask != mask) return false;  // at another op: it may complete first
  }
  if (op == WarpOp::ballot || op == WarpOp::vote_any || op == WarpOp::vote_all) {
    // Votes: the bits of the members whose predicate is non-zero.
    uint32_t ballot = 0;
    for (uint32_t bits = members; bits != 0; bits &= bits - 1)
      if (lanes[__builtin_ctz(bits)].value != 0) ballot |= 1u << __builtin_ctz(bits);
    const uint64_t r = op == WarpOp::ballot ? ballot : op == WarpOp::vote_any ? ballot != 0 : ballot == members;
    for (uint32_t bits = members; bits != 0; bits &= bits - 1) lanes[__builtin_ctz(bits)].result = r;
  } else if (op != WarpOp::syncwarp) {
    for (uint32_t bits = members; bits != 0; bits &= bits - 1) {
      const int me = __builtin_ctz(bits);
      Thread& t = lanes[me];
      // PTX shfl.sync: segmask from the width, clamp 31 (0 for up), source lane j.
      const int segmask = (32 - t.width) & 0x1f, clamp = op == WarpOp::shfl_up ? 0 : 31;
      const int bval = t.b & 0x1f;
      const int max_lane = (me & segmask) | (clamp & ~segmask), min_lane = me & segmask;
      int j = me;
      bool in_range = false;
      switch (op) {
        case WarpOp::shfl_up: j = me - bval; in_range = j >= max_lane; break;
        case WarpOp::shfl_down: j = me + bval; in_range = j <= max_lane; break;
        case WarpOp::shfl_xor: j = me ^ bval; in_range = j <= max_lane; break;
        case WarpOp::shfl_idx: j = min_lane | (bval & ~segmask); in_range = j <= max_lane; break;
        default: break;
      }
      if (!in_range) j = me;
      if (!(members >> j & 1u)) {
        e.fault = fmt("%s at %s: warp %u lane %d reads lane %d, which %s (undefined on a GPU)", op_name(op),
                      where(t).c_str(), warp, me, j,
                      !(mask >> j & 1u)                        ? fmt("is not in the mask 0x%08x", mask).c_str()
                      : warp * kWarp + unsigned(j) >= e.nthreads ? "does not exist (the block ends before it)"
                                                                 : "has returned");
        return false;
      }
      t.result = lanes[j].value;
    }
  }
  for (uint32_t bits = members; bits != 0; bits &= bits - 1) {
    const unsigned lane = unsigned(__builtin_ctz(bits));
    release(e, lanes[lane], warp * kWarp + lane);
  }
  return true;
}

// After thread `index` returned: barriers it no longer holds up may complete.
void on_return(Engine& e, unsigned index) {
  if (e.sync_waiting > 0 && e.sync_waiting == e.live) complete_sync(e);
  const unsigned warp = index / kWarp;
  for (uint32_t bits = e.warp_waiting[warp]; bits != 0 && e.fault.empty();) {
    if (try_complete_warp(e, warp, unsigned(__builtin_ctz(bits))))
      bits = e.warp_waiting[warp];
    else
      bits &= bits - 1;
  }
}

void start_thread(Engine& e, Thread& t, unsigned index) {
  const dim3 bd = e.block.block_dim;
  t = Thread{};
  t.coords.thread_idx = uint3{index % bd.x, (index / bd.x) % bd.y, index / (bd.x * bd.y)};
  t.state = State::running;
  t.fiber = e.running;
  e.current = &t;
  t_thread = &t.coords;
}

void worker_entry() {
  Engine& e = engine();
  ctx_landed(&e.running->ctx);
  for (;;) {
    Fiber* self = e.running;
    while (e.fault.empty() && e.next_unstarted < e.nthreads) {
      const unsigned index = e.next_unstarted++;
      Thread& t = e.threads[index];
      start_thread(e, t, index);
      e.invoke(e.call);
      t.state = State::done;
      t.wait = Wait::none;
      e.warp_live[index / kWarp] &= ~(1u << (index % kWarp));
      e.current = nullptr;
      --e.live;
      on_return(e, index);
    }
    self->idle = true;
    e.idle.push_back(self);
    switch_away(e, &self->ctx);
  }
}

// Ranges of thread indices, "0-15, 48-63".
std::string ranges(const std::vector<unsigned>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += ids[i] == ids[j] ? fmt("%u", ids[i]) : fmt("%u-%u", ids[i], ids[j]);
    i = j + 1;
  }
  return s;
}

// No thread can move: who waits where.
std::string deadlock_report(Engine& e) {
  struct Group {
    std::string what;
    std::vector<unsigned> ids;
  };
  std::vector<Group> groups;
  std::vector<unsigned> gone;
  for (unsigned i = 0; i < e.nthreads; ++i) {
    const Thread& t = e.threads[i];
    if (i >= e.next_unstarted) continue;
    if (t.state == State::done) {
      gone.push_back(i);
      continue;
    }
    const std::string what = t.wait == Wait::sync ? fmt("__syncthreads at %s", where(t).c_str())
                                                  : fmt("%s(mask 0x%08x) at %s", op_name(t.op), t.mask, where(t).c_str());
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.what == what; });
    if (g == groups.end()) groups.push_back({what, {i}});
    else g->ids.push_back(i);
  }
  std::string r = "deadlock: no thread of the block can move;";
  for (const Group& g : groups) r += fmt(" threads %s wait at %s;", ranges(g.ids).c_str(), g.what.c_str());
  if (!gone.empty()) r += fmt(" threads %s have returned", ranges(gone).c_str());
  else r += " no thread has returned";
  return r;
}

// Runs one block to its end; "" or why it failed.
std::string run_block(Engine& e, uint3 block_idx, unsigned nthreads) {
  e.block.block_idx = block_idx;
  e.nthreads = nthreads;
  e.next_unstarted = 0;
  e.live = nthreads;
  e.sync_waiting = 0;
  e.runnable.clear();
  e.runnable_head = 0;
  e.current = nullptr;
  const unsigned warps = (nthreads + kWarp - 1) / kWarp;
  e.warp_live.assign(warps, ~0u);
  if (nthreads % kWarp != 0) e.warp_live[warps - 1] = (1u << (nthreads % kWarp)) - 1;
  e.warp_waiting.assign(warps, 0u);
  e.shared_seen.clear();
  e.static_shared = 0;
  e.fault.clear();
  if (e.shmem > 0) std::memset(e.dynamic.get(), 0xff, e.shmem);  // NaN: shared memory starts undefined
  e.running = take_fiber(e);
  ctx_switch(&e.main, &e.running->ctx);
  // Back in main: the block is done, stuck or failed.
  if (e.fault.empty() && e.live > 0) e.fault = deadlock_report(e);
  if (e.fault.empty()) return "";
  for (auto& f : e.fibers) {  // abandon every fiber still inside a thread
    if (f->idle) continue;
    ctx_restart(&f->ctx, worker_entry);
    f->idle = true;
    e.idle.push_back(f.get());
  }
  e.running = nullptr;
  e.current = nullptr;
  return e.fault;
}

[[noreturn]] void outside_kernel(const char* what, const char* file, int line) {
  std::fprintf(stderr, "cuemu: %s called outside a kernel at %s:%d\n", what, file, line);
  std::abort();
}

std::mutex g_limits_mu;
std::unordered_map<const void*, size_t> g_dynamic_limits;

}  // namespace

void syncthreads(const char* file, int line) {
  Engine& e = engine();
  if (e.current == nullptr) outside_kernel("__syncthreads", file, line);
  Thread& t = *e.current;
  t.wait = Wait::sync;
  t.file = file;
  t.line = line;
  if (++e.sync_waiting == e.live) {
    complete_sync(e);
    if (!e.fault.empty()) fail_thread(e);
    return;
  }
  t.state = State::waiting;
  switch_away(e, &t.fiber->ctx);
}

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int b, int width, const char* file, int line) {
  Engine& e = engine();
  if (e.current == nullptr) outside_kernel(op_name(op), file, line);
  Thread& t = *e.current;
  const unsigned index = unsigned(&t - e.threads.data()), warp = index / kWarp, lane = index % kWarp;
  if (!(mask >> lane & 1u)) {
    e.fault = fmt("%s at %s:%d: thread %u (warp %u lane %u) is not in its own mask 0x%08x", op_name(op), file, line,
                  index, warp, lane, mask);
    fail_thread(e);
  }
  const bool shuffle = op == WarpOp::shfl_idx || op == WarpOp::shfl_up || op == WarpOp::shfl_down || op == WarpOp::shfl_xor;
  if (shuffle && (width < 1 || width > 32 || (width & (width - 1)) != 0)) {
    e.fault = fmt("%s at %s:%d: width %d is not a power of 2 in [1, 32]", op_name(op), file, line, width);
    fail_thread(e);
  }
  t.wait = Wait::warp;
  e.warp_waiting[warp] |= 1u << lane;
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.b = b;
  t.width = width;
  t.file = file;
  t.line = line;
  if (try_complete_warp(e, warp, lane)) return t.result;  // the last to arrive goes on
  if (!e.fault.empty()) fail_thread(e);
  t.state = State::waiting;
  switch_away(e, &t.fiber->ctx);
  return t.result;
}

void shared_var(void* p, size_t bytes, const char* file, int line) {
  Engine& e = engine();
  if (e.current == nullptr) outside_kernel("a __shared__ declaration", file, line);
  for (const auto& [q, n] : e.shared_seen)
    if (q == p) return;
  e.shared_seen.emplace_back(p, bytes);
  e.static_shared += bytes;
  const size_t static_limit = device_props().sharedMemPerBlock;
  if (e.static_shared > static_limit) {
    e.fault = fmt("__shared__ at %s:%d: %zu bytes of static shared memory, more than %zu (ptxas refuses it)", file,
                  line, e.static_shared, static_limit);
    fail_thread(e);
  }
  if (e.static_shared + e.shmem > e.shared_limit) {
    e.fault = fmt("__shared__ at %s:%d: %zu bytes of static and %zu of dynamic shared memory, more than the %zu a "
                  "block may use",
                  file, line, e.static_shared, e.shmem, e.shared_limit);
    fail_thread(e);
  }
  std::memset(p, 0xff, bytes);  // undefined at the block's start: NaN for floats
}

void* dynamic_shared() {
  Engine& e = engine();
  if (e.current == nullptr) outside_kernel("extern __shared__", "?", 0);
  return e.dynamic.get();
}

void run_grid(const LaunchSite& site, const void* kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
              void (*invoke)(const void*), const void* call, const PointerArg* ptrs, size_t nptrs) {
  const std::string name = fmt("kernel %s (launched at %s:%d)", site.kernel, site.file, site.line);
  const cudaDeviceProp& p = device_props();
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    fail(cudaErrorInvalidConfiguration, fmt("%s: grid (%u, %u, %u), block (%u, %u, %u) has a zero dimension",
                                            name.c_str(), grid.x, grid.y, grid.z, block.x, block.y, block.z));
    return;
  }
  if (threads > (unsigned long long)p.maxThreadsPerBlock || block.x > unsigned(p.maxThreadsDim[0]) ||
      block.y > unsigned(p.maxThreadsDim[1]) || block.z > unsigned(p.maxThreadsDim[2])) {
    fail(cudaErrorInvalidConfiguration,
         fmt("%s: block (%u, %u, %u) is %llu threads; a block has at most %d threads, (%d, %d, %d) in each dimension",
             name.c_str(), block.x, block.y, block.z, threads, p.maxThreadsPerBlock, p.maxThreadsDim[0],
             p.maxThreadsDim[1], p.maxThreadsDim[2]));
    return;
  }
  if (grid.x > unsigned(p.maxGridSize[0]) || grid.y > unsigned(p.maxGridSize[1]) || grid.z > unsigned(p.maxGridSize[2])) {
    fail(cudaErrorInvalidConfiguration, fmt("%s: grid (%u, %u, %u) is past the limits (%d, %d, %d)", name.c_str(),
                                            grid.x, grid.y, grid.z, p.maxGridSize[0], p.maxGridSize[1],
                                            p.maxGridSize[2]));
    return;
  }
  const size_t dyn_limit = dynamic_shared_limit(kernel);
  if (shmem > dyn_limit) {
    fail(cudaErrorInvalidValue, fmt("%s: %zu bytes of dynamic shared memory, more than %zu%s", name.c_str(), shmem,
                                    dyn_limit, dyn_limit == p.sharedMemPerBlock
                                                   ? " (cudaFuncSetAttribute raises the limit)" : ""));
    return;
  }
  if (!valid_stream(stream)) {
    fail(cudaErrorInvalidResourceHandle, fmt("%s: stream %p is not a live stream", name.c_str(),
                                             static_cast<void*>(stream)));
    return;
  }
  for (size_t i = 0; i < nptrs; ++i) {
    Region r;
    if (ptrs[i].value != nullptr && !find_region(ptrs[i].value, &r)) {
      fail(cudaErrorInvalidValue, fmt("%s: argument %d is %s: a kernel may only be given device memory (a host "
                                      "pointer handed to a device op)",
                                      name.c_str(), ptrs[i].index, describe_pointer(ptrs[i].value).c_str()));
      return;
    }
  }
  Engine& e = engine();
  if (e.site != nullptr) outside_kernel("a kernel launch", site.file, site.line);  // from inside a kernel
  e.site = &site;
  e.invoke = invoke;
  e.call = call;
  e.shmem = shmem;
  e.shared_limit = dyn_limit > p.sharedMemPerBlock ? p.sharedMemPerBlockOptin : p.sharedMemPerBlock;
  e.dynamic.reset(new unsigned char[shmem > 0 ? shmem : 1]);
  e.block.grid_dim = grid;
  e.block.block_dim = block;
  if (e.threads.size() < threads) e.threads.resize(threads);
  t_block = &e.block;
  std::string why;
  for (unsigned z = 0; z < grid.z && why.empty(); ++z)
    for (unsigned y = 0; y < grid.y && why.empty(); ++y)
      for (unsigned x = 0; x < grid.x && why.empty(); ++x) {
        why = run_block(e, uint3{x, y, z}, unsigned(threads));
        if (!why.empty())
          why = fmt("%s, block (%u, %u, %u) of (%u, %u, %u), %llu threads: %s", name.c_str(), x, y, z, grid.x, grid.y,
                    grid.z, threads, why.c_str());
      }
  e.site = nullptr;
  e.dynamic.reset();
  t_thread = nullptr;
  t_block = nullptr;
  if (!why.empty()) {
    fail(cudaErrorLaunchFailure, why);
    return;
  }
  const std::string damage = check_guards();
  if (!damage.empty()) fail(cudaErrorIllegalAddress, fmt("%s: %s", name.c_str(), damage.c_str()));
}

}  // namespace detail

size_t dynamic_shared_limit(const void* kernel) {
  std::lock_guard<std::mutex> l(detail::g_limits_mu);
  auto it = detail::g_dynamic_limits.find(kernel);
  return it != detail::g_dynamic_limits.end() ? it->second : device_props().sharedMemPerBlock;
}
void set_dynamic_shared_limit(const void* kernel, size_t bytes) {
  std::lock_guard<std::mutex> l(detail::g_limits_mu);
  detail::g_dynamic_limits[kernel] = bytes;
}

}  // namespace cuemu
