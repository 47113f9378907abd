// The simulated device's arena and streams (base/sim_device.h): device memory that host
// code cannot touch (a read or a write of a device pointer dies at once with one line
// naming the simulated device and the address), the checks every simulated op makes on
// its pointers, sharing a range with another process, the memory tracker's sim counters,
// and the streams' order and tickets.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/device_spec.h"
#include "base/memory.h"
#include "base/sim_device.h"

using namespace rz;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct ChildResult {
  int status = 0;
  std::string err;
};

// Runs f in a forked child with stderr captured; the child exits 0 if f returns.
ChildResult in_child(const std::function<void()>& f) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL);  // the child's death is the result, not a Catch report
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);  // Catch's own fatal-signal report of a chained SIGSEGV
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    f();
    _exit(0);
  }
  close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) r.err.append(buf, size_t(n));
  close(fds[0]);
  REQUIRE(waitpid(pid, &r.status, 0) == pid);
  return r;
}

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

}  // namespace

TEST_CASE("a host read or write of device memory dies naming the simulated device and the address") {
  for (bool write : {false, true}) {
    CAPTURE(write);
    const ChildResult r = in_child([write] {
      sim::register_allocator();  // as the sim backend does when it is made
      Buffer<float> buf(MemTag::workspace, 1000, Device{DeviceKind::sim, 0});
      volatile float* p = buf.data() + 10;
      std::fprintf(stderr, "address %p\n", static_cast<void*>(const_cast<float*>(p)));
      if (write) *p = 1.0f;
      else (void)*p;  // the faulting line
    });
    INFO(r.err);
    REQUIRE(WIFSIGNALED(r.status));
    CHECK(WTERMSIG(r.status) == SIGABRT);
    const size_t at = r.err.find("address ");
    REQUIRE(at != std::string::npos);
    const std::string addr = r.err.substr(at + 8, r.err.find('\n', at) - at - 8);
    CHECK(r.err.find("ringzero: host code touched simulated-device memory at " + addr +
                     " (the simulated device's arena ") != std::string::npos);
    CHECK(r.err.find("--device sim") != std::string::npos);
  }
}

TEST_CASE("a fault outside the arena is still an ordinary segfault") {
  const ChildResult r = in_child([] {
    sim::device_free(sim::device_alloc(64));  // the handler is installed
    // A page no one maps (and no compiler can prove empty).
    volatile uintptr_t where = 16;
    volatile int* nowhere = reinterpret_cast<volatile int*>(where);
    (void)*nowhere;
  });
  INFO(r.err);
  // Passed on to whoever handled SIGSEGV before (the default action, Catch's report, a
  // sanitizer's): still fatal, and not reported as the simulated device's.
  CHECK_FALSE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0));
  CHECK(r.err.find("simulated-device") == std::string::npos);
}

TEST_CASE("host_view checks every pointer an op receives, naming the op and the argument") {
  void* p = sim::device_alloc(1000);
  REQUIRE(p != nullptr);
  REQUIRE(reinterpret_cast<uintptr_t>(p) % sim::kAlignment == 0);
  REQUIRE(sim::is_device_address(p));
  auto* h = static_cast<unsigned char*>(sim::host_view(p, 1000, "op", "x"));
  REQUIRE(h != p);
  for (int i = 0; i < 1000; ++i) REQUIRE(h[i] == 0);  // zero-filled
  h[999] = 7;
  CHECK(static_cast<unsigned char*>(sim::host_view(static_cast<char*>(p) + 999, 1, "op", "x"))[0] == 7);

  std::vector<float> host(10);
  CHECK(error_of([&] { sim::host_view(host.data(), 40, "matmul_forward", "weight"); }).find(
            "matmul_forward: weight (") == 0);
  CHECK(error_of([&] { sim::host_view(host.data(), 40, "matmul_forward", "weight"); }).find(
            "is not simulated-device memory: a host pointer where the op wants a device pointer") != std::string::npos);
  CHECK(error_of([&] { sim::host_view(p, 1001, "gelu_forward", "out"); }).find("runs past its allocation (1001 bytes "
                                                                                "from offset 0 of a 1000-byte") !=
        std::string::npos);
  CHECK(error_of([&] { sim::host_view(nullptr, 4, "residual_forward", "a"); }).find("residual_forward: a") == 0);
  CHECK(sim::host_view(nullptr, 0, "op", "empty") == nullptr);  // nothing is touched

  CHECK(error_of([&] { sim::check_host(p, 4, "copy_to_host", "host_dst"); }).find(
            "copy_to_host: host_dst (" + hex(p) + ") is simulated-device memory") == 0);
  sim::check_host(host.data(), 40, "copy_to_host", "host_dst");

  sim::device_free(p);
  CHECK(error_of([&] { sim::host_view(p, 4, "zero", "dst"); }).find("lies in freed") != std::string::npos);
  CHECK(error_of([&] { sim::device_free(p); }).find("not a live allocation") != std::string::npos);
  void* q = sim::device_alloc(1000);  // reuses the freed room, zeroed again
  auto* hq = static_cast<unsigned char*>(sim::host_view(q, 1000, "op", "x"));
  for (int i = 0; i < 1000; ++i) REQUIRE(hq[i] == 0);
  sim::device_free(q);
}

TEST_CASE("device buffers are counted per tag under DeviceKind::sim, not as host memory") {
  sim::register_allocator();  // as the sim backend does when it is made
  MemoryTracker& mt = MemoryTracker::global();
  const size_t host0 = mt.current(MemTag::grads), sim0 = mt.current(MemTag::grads, DeviceKind::sim);
  const size_t in_use0 = sim::device_bytes_in_use();
  {
    Buffer<float> g(MemTag::grads, 4096, Device{DeviceKind::sim, 3});
    CHECK(g.device() == Device{DeviceKind::sim, 3});
    CHECK(mt.current(MemTag::grads, DeviceKind::sim) == sim0 + 4096 * sizeof(float));
    CHECK(mt.current(MemTag::grads) == host0);
    CHECK(sim::device_bytes_in_use() == in_use0 + 4096 * sizeof(float));
  }
  CHECK(mt.current(MemTag::grads, DeviceKind::sim) == sim0);
  CHECK(device_name(Device{DeviceKind::sim, 2}) == "sim:2");
  CHECK(parse_device_spec("sim").device() == Device{DeviceKind::sim, 0});
  CHECK(parse_device_spec("sim:7").device() == Device{DeviceKind::sim, 7});
  CHECK(error_of([] { parse_device_spec("sim:8"); }).find("ordinals sim:0 .. sim:7") != std::string::npos);
  CHECK(error_of([] { parse_device_spec("sim:x"); }).find("device: expected cpu, cuda or cuda:K") == 0);
}

TEST_CASE("a shared range maps into another process as device memory, the same bytes") {
  float* p = static_cast<float*>(sim::device_alloc(6100 * sizeof(float)));
  float* range = p + 1000;  // not page-aligned
  const size_t n = 5000;
  float* h = static_cast<float*>(sim::host_view(range, n * sizeof(float), "test", "range"));
  for (size_t i = 0; i < n; ++i) h[i] = float(i);
  const sim::ShareHandle handle = sim::share(range, n * sizeof(float));
  CHECK(sim::open_shared(handle) == range);  // the same process: the owner's own address

  const ChildResult r = in_child([&] {
    // A peer process would be another program; a fork shares the parent's arena mapping,
    // so the child opens the handle as a peer would after renaming itself (pid check).
    sim::ShareHandle peer = handle;
    peer.pid = static_cast<int32_t>(getppid());
    void* d = sim::open_shared(peer);
    if (d == range || !sim::is_device_address(d)) _exit(3);
    auto* v = static_cast<float*>(sim::host_view(d, n * sizeof(float), "test", "peer"));
    for (size_t i = 0; i < n; ++i)
      if (v[i] != float(i)) _exit(4);
    v[0] = -1.0f;  // the owner sees it
    try {
      sim::host_view(d, n * sizeof(float) + 4, "test", "peer");
      _exit(5);
    } catch (const Error&) {
    }
    sim::close_shared(d);
    if (sim::is_device_address(d)) _exit(6);
    _exit(0);
  });
  INFO(r.err);
  REQUIRE(WIFEXITED(r.status));
  CHECK(WEXITSTATUS(r.status) == 0);
  CHECK(h[0] == -1.0f);
  sim::device_free(p);
}

TEST_CASE("a stream runs its work in order on its own thread; tickets mark points on it") {
  sim::Stream s;
  std::vector<int> order;
  std::atomic<bool> release{false};
  s.enqueue([&] {
    while (!release) std::this_thread::yield();
    order.push_back(1);
  });
  const uint64_t t1 = s.record();
  s.enqueue([&] { order.push_back(2); });
  s.enqueue([] { throw Error("boom"); });
  const uint64_t t2 = s.record();
  CHECK_FALSE(s.done(t1));
  const sim::StreamMark m{&s, t1};
  CHECK_FALSE(m.done());
  release = true;
  m.wait();
  CHECK(s.done(t1));
  s.wait(t2);
  CHECK(order == std::vector<int>{1, 2});
  REQUIRE(s.error() != nullptr);
  CHECK(error_of([&] { std::rethrow_exception(s.error()); }) == "boom");
  CHECK(sim::StreamMark{}.done());  // the compute stream: always finished
}
