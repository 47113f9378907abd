#include "launch/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>

#include "base/check.h"
#include "base/checked.h"
#include "base/printable.h"
#include "base/stop_signal.h"
#include "comm/rank_env.h"
#include "comm/rendezvous/job_auth.h"
#include "comm/rendezvous/socket.h"

namespace rz {

namespace {

// A stop signal to the launcher, and whether the user asked again: a second signal at least
// kRepeatWindowS after the first (one request is often delivered twice at once: timeout(1)
// signals the launcher and then its own process group, a group kill reaches everyone).
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_stop_again = 0;
std::atomic<int64_t> g_first_stop_ns{0};
void on_stop_signal(int sig) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  if (g_stop_signal == 0) {
    g_stop_signal = sig;
    g_first_stop_ns.store(now);
  } else if (static_cast<double>(now - g_first_stop_ns.load()) >= kRepeatWindowS * 1e9) {
    g_stop_again = 1;
  }
}

struct Child {
  int rank = 0;
  uint64_t exit_order = 0;  // when its exit was seen (1, 2, ...); 0 while running
  pid_t pid = -1;
  int err_fd = -1;        // read end of the child's stderr pipe
  std::string pending;    // stderr bytes not yet ending in a newline
  std::string last_line;  // last complete stderr line (its error, if it failed)
  bool running = true;
  int status = 0;         // exit code, or 128 + signal
  int killed_by = 0;      // the signal that ended it (0: it exited)
  int received = 0;       // the signal its stop notice says reached it (base/stop_signal.h)
  bool signalled_by_launcher = false;  // the launcher sent it SIGTERM or SIGKILL before it ended
  // It exited 128 + SIGINT/SIGTERM by itself: a training rank's stop after a signal, which
  // reached it (received) or another rank.
  bool stopped_after_signal() const {
    return killed_by == 0 && (status == 128 + SIGINT || status == 128 + SIGTERM);
  }
};

void decode_status(Child& c, int wstatus) {
  c.killed_by = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
  c.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : c.killed_by > 0 ? 128 + c.killed_by : 1;
}

std::string describe_status(const Child& c) {
  if (c.killed_by > 0) return strfmt("was killed by %s (%s)", signal_name(c.killed_by).c_str(), strsignal(c.killed_by));
  if (c.received > 0 && c.stopped_after_signal())
    return strfmt("received %s and stopped after its step", signal_name(c.received).c_str());
  return strfmt("exited with status %d", c.status);
}

// Echo complete lines of a child's stderr with a rank prefix; keep the last one.
void drain_stderr(Child& c, bool flush_partial) {
  if (c.err_fd >= 0) {
    char buf[4096];
    for (;;) {
      ssize_t n = read(c.err_fd, buf, sizeof(buf));
      if (n > 0) {
        c.pending.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {  // EOF: the child closed stderr (it exited)
        close(c.err_fd);
        c.err_fd = -1;
        flush_partial = true;
      }
      break;  // EAGAIN or error: nothing more right now
    }
  }
  size_t start = 0;
  for (size_t nl; (nl = c.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = c.pending.substr(start, nl - start);
    int notice_rank = -1, sig = 0;
    if (parse_stop_notice(line, &notice_rank, &sig) && notice_rank == c.rank) {
      c.received = sig;
      if (g_stop_signal != 0) continue;  // the launcher passed the signal on itself: it says so once
    }
    line = printable(line);  // a rank's line quotes files and peers: never raw to the terminal
    std::fprintf(stderr, "[rank %d] %s\n", c.rank, line.c_str());
    if (!line.empty()) c.last_line = line;
  }
  c.pending.erase(0, start);
  if (flush_partial && !c.pending.empty()) {
    c.last_line = printable(c.pending);
    std::fprintf(stderr, "[rank %d] %s\n", c.rank, c.last_line.c_str());
    c.pending.clear();
  }
}

void signal_running(std::vector<Child>& children, int sig) {
  for (auto& c : children)
    if (c.running) {
      kill(c.pid, sig);
      c.signalled_by_launcher = true;
    }
}

// Reap every child that has exited; returns how many are still running. Children seen
// in the same pass share an exit_order (their order within it is unknown).
int reap(std::vector<Child>& children) {
  static uint64_t pass = 0;
  ++pass;
  int running = 0;
  for (auto& c : children) {
    if (!c.running) continue;
    int wstatus = 0;
    pid_t r = waitpid(c.pid, &wstatus, WNOHANG);
    if (r == c.pid) {
      c.running = false;
      decode_status(c, wstatus);
      c.exit_order = pass;
      drain_stderr(c, true);
    } else {
      ++running;
    }
  }
  return running;
}

// A knock-on failure: a rank that only saw another rank go away.
bool looks_like_knock_on(const std::string& line) {
  for (const char* s : {"closed the connection", "closed its", "died", "hung up", "peer", "connection closed",
                        "Broken pipe", "Connection reset"})
    if (line.find(s) != std::string::npos) return true;
  return false;
}

void pump_stderr(std::vector<Child>& children, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  for (auto& c : children)
    if (c.err_fd >= 0) {
      fds.push_back({c.err_fd, POLLIN, 0});
      owners.push_back(&c);
    }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return;
  }
  int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) drain_stderr(*owners[i], false);
}

std::vector<char*> as_c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::milliseconds(static_cast<long>(s * 1000));
}

// Until every child has exited. A rank that fails stops everyone: SIGTERM at once, SIGKILL
// after stop_grace_s. A rank that stopped after a signal (a training rank's agreed stop:
// every rank saves and exits after the same step), or one that failed only because a peer
// went away, leaves the others stop_grace_s to exit by themselves first: the peer that
// went away is still unwinding and about to print the error that says why.
// A stop signal to the launcher is passed on (forward_stop: the same signal, marked as the
// launcher's) and the ranks get signal_grace_s to finish their step and save: the launcher
// waits for them instead of killing them, so a signal that reached every process of the
// job at once (scancel, systemd, a cgroup stop) costs no checkpoint. The user asking again
// (base/stop_signal.h's kRepeatWindowS) is passed on as kStopNow, SIGKILL stop_grace_s later.
void watch_children(std::vector<Child>& children, const LaunchOptions& opts) {
  enum class Phase { running, waiting, terminating, killed } phase = Phase::running;
  auto deadline = std::chrono::steady_clock::time_point::max();
  int requests_passed_on = 0;  // 1: the first stop request, 2: the second (stop now)
  auto terminate = [&](double grace) {
    signal_running(children, SIGTERM);
    phase = Phase::terminating;
    deadline = std::chrono::steady_clock::now() + seconds(grace);
  };
  auto pass_on = [&](bool now, double grace) {
    for (auto& c : children)
      if (c.running) {
        forward_stop(c.pid, g_stop_signal, now);
        c.signalled_by_launcher = true;
      }
    phase = Phase::terminating;
    deadline = std::chrono::steady_clock::now() + seconds(grace);
  };
  for (;;) {
    pump_stderr(children, 50);
    const int running = reap(children);
    bool failed = false, waits = false;  // a failure of its own; a stop or a knock-on failure
    for (const Child& c : children)
      if (!c.running && c.status != 0)
        (c.stopped_after_signal() || looks_like_knock_on(c.last_line) ? waits : failed) = true;
    const bool late = std::chrono::steady_clock::now() > deadline;
    const int requests = g_stop_signal == 0 ? 0 : g_stop_again ? 2 : 1;
    if (requests > requests_passed_on && phase != Phase::killed) {
      // The first request while the ranks run; a second one, or one while they are already
      // being stopped after a failure, stops them at once.
      const bool now = requests == 2 || phase == Phase::terminating;
      pass_on(now, now ? opts.stop_grace_s : opts.signal_grace_s);
      requests_passed_on = requests;
    } else if (phase == Phase::running || phase == Phase::waiting) {
      if (failed || (phase == Phase::waiting && late)) {
        terminate(opts.stop_grace_s);
      } else if (waits && phase == Phase::running) {
        phase = Phase::waiting;
        deadline = std::chrono::steady_clock::now() + seconds(opts.stop_grace_s);
      }
    } else if (phase == Phase::terminating && late) {
      signal_running(children, SIGKILL);  // the grace period is over
      phase = Phase::killed;
    }
    if (running == 0) break;
  }
  for (auto& c : children) drain_stderr(c, true);
}

std::string rank_list(const std::vector<const Child*>& v) {
  std::string out;
  for (const Child* c : v) out += strfmt("%s%d", out.empty() ? "" : ", ", c->rank);
  return out;
}

// One line on what happened, and the launcher's exit status: the rank that failed on its
// own (not one the launcher stopped, not a knock-on of a peer going away, the earliest),
// else the signal the launcher passed on, else the signal a rank received and every rank
// stopped after.
int report_children(const std::vector<Child>& children) {
  const Child* failed = nullptr;
  auto key = [](const Child& c) { return std::tuple(looks_like_knock_on(c.last_line), c.exit_order, c.rank); };
  std::vector<const Child*> stopped_by_launcher, received;
  for (const Child& c : children) {
    if (c.status != 0 && c.signalled_by_launcher) stopped_by_launcher.push_back(&c);
    if (c.received > 0) received.push_back(&c);
    // A rank that a stop signal ended (the user's, asked twice) is part of the stop, not a failure.
    const bool stopped_by_signal = g_stop_signal != 0 && (c.killed_by == SIGINT || c.killed_by == SIGTERM);
    if (c.status == 0 || c.stopped_after_signal() || c.signalled_by_launcher || stopped_by_signal) continue;
    if (failed == nullptr || key(c) < key(*failed)) failed = &c;
  }
  if (failed != nullptr) {
    std::fprintf(stderr, "ringzero: rank %d %s; %s%s%s\n", failed->rank, describe_status(*failed).c_str(),
                 stopped_by_launcher.empty() ? "the other ranks ended too" : "the launcher stopped the other ranks",
                 failed->last_line.empty() ? "" : ". Its error: ", failed->last_line.c_str());
    return failed->status;
  }
  if (g_stop_signal != 0) {
    const bool killed = std::any_of(children.begin(), children.end(), [](const Child& c) { return c.killed_by == SIGKILL; });
    std::fprintf(stderr, "ringzero: interrupted by %s; passed it on to every rank: they %s\n",
                 signal_name(g_stop_signal).c_str(),
                 g_stop_again ? "were stopped at once when it came again (a checkpoint being written is left "
                                "incomplete, never torn; the previous one stays whole)"
                 : killed     ? "did not all stop within the grace period and were killed before they could save"
                              : "finished their step and stopped");
    return 128 + g_stop_signal;
  }
  const auto stopped = std::find_if(children.begin(), children.end(), [](const Child& c) { return c.stopped_after_signal(); });
  if (stopped == children.end()) return 0;
  const std::string late = stopped_by_launcher.empty()
                               ? std::string()
                               : strfmt("; the launcher stopped rank %s, which had not exited",
                                        rank_list(stopped_by_launcher).c_str());
  if (received.empty()) {
    std::fprintf(stderr, "ringzero: rank %d stopped after a signal (exit status %d)%s\n", stopped->rank,
                 stopped->status, late.c_str());
    return stopped->status;
  }
  std::string who;
  for (const Child* c : received)
    who += strfmt("%srank %d received %s", who.empty() ? "" : ", ", c->rank, signal_name(c->received).c_str());
  std::fprintf(stderr, "ringzero: %s; every rank finished its step and stopped%s\n", who.c_str(), late.c_str());
  return 128 + received[0]->received;
}

}  // namespace

bool launched_by_ringzero() {
  const char* v = std::getenv("RINGZERO_LAUNCHED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void refuse_launch_flags_under_launcher(const std::vector<std::string>& given) {
  if (given.empty() || launched_by_ringzero()) return;
  const RankEnv env = rank_env_from_environment();
  if (*env.launcher == 0) return;
  std::string flags, vars, names;
  for (const auto& f : given) flags.append(flags.empty() ? "" : ", ").append(f);
  for (const auto& v : launcher_variables(env)) {
    vars.append(vars.empty() ? "" : " ").append(v);
    names.append(" ").append(v, 0, v.find('='));
  }
  RZ_FAIL("%s given, but the environment already makes this process rank %d of %d (%s's %s, perhaps left over from "
          "another job): unset%s to launch the ranks from here, or drop the launch flag%s to run as that rank",
          flags.c_str(), env.rank, env.world_size, env.launcher, vars.c_str(), names.c_str(),
          given.size() > 1 ? "s" : "");
}

std::string self_executable() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  RZ_CHECK(n > 0, "cannot find the running executable (/proc/self/exe): %s", errno_string().c_str());
  path[n] = '\0';
  return path;
}

int pick_free_port(const std::string& host) {
  // The kernel picks the port; the socket is closed again at once, so the port is only
  // known to have been free a moment ago.
  return Socket::listen_on(0, "launcher: finding a free port", host).local_port();
}

namespace {

// The port and job token every rank is given: the options', else RINGZERO_JOB_TOKEN; a
// single node makes up what is missing (a free port, a random token), a job of several
// nodes must name both, the same on every node.
struct JobAddress {
  int port = 0;
  std::string token;
};

JobAddress job_address(const LaunchOptions& opts) {
  JobAddress job{opts.master_port, opts.job_token};
  if (job.token.empty() && std::getenv("RINGZERO_JOB_TOKEN")) job.token = std::getenv("RINGZERO_JOB_TOKEN");
  if (opts.nnodes > 1) {
    RZ_CHECK(job.port > 0, "--master-port is required with --nnodes %d (every node must use the same one)",
             opts.nnodes);
    RZ_CHECK(!job.token.empty(),
             "set RINGZERO_JOB_TOKEN to the same secret on every node when --nnodes is %d", opts.nnodes);
  } else {
    if (job.port == 0) job.port = pick_free_port(opts.master_addr);
    if (job.token.empty()) job.token = random_job_token();
  }
  return job;
}

// Forks and executes child_argv as rank c.rank: its stderr goes into a pipe whose read end
// (non-blocking) becomes c.err_fd, env_kv ("NAME=value") into its environment, and
// OMP_NUM_THREADS = omp_threads unless the user set it.
void start_rank(Child& c, const std::vector<std::string>& child_argv, std::vector<std::string>& env_kv,
                int omp_threads, pid_t launcher_pid) {
  int pipefd[2];
  RZ_SYSCHECK(pipe2(pipefd, O_CLOEXEC), "launcher: pipe()");
  std::vector<std::string> args = child_argv;
  // TEST ONLY: RINGZERO_TEST_FORK_FAILS=R makes rank R's fork fail as a full process table would.
  const char* fail_at = std::getenv("RINGZERO_TEST_FORK_FAILS");
  // SIGINT and SIGTERM are blocked across the fork: one that came between the fork and the
  // child's reset to the default action would run the launcher's handler in the child (which
  // only notes it) and be lost; blocked, it stays pending and ends the child at the unblock.
  sigset_t stops, old_mask;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigprocmask(SIG_BLOCK, &stops, &old_mask);
  pid_t pid = fail_at != nullptr && std::atoi(fail_at) == c.rank ? (errno = EAGAIN, -1) : fork();
  if (pid != 0) {
    const int err = errno;
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    errno = err;
  }
  if (pid < 0) {
    const int err = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    errno = err;
  }
  RZ_SYSCHECK(pid, "launcher: fork() for rank %d", c.rank);
  if (pid == 0) {
    // Child: stderr into the pipe, rank variables into the environment, then exec.
    // A launcher that dies (even by SIGKILL) takes its ranks with it: SIGTERM, which a
    // training rank answers by finishing its step and saving (base/stop_signal.h).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher_pid) _exit(128 + SIGTERM);  // it died before prctl
    // Its own process group: a terminal's Ctrl-C reaches the launcher only, which passes
    // it on (base/stop_signal.h: a rank reached both ways would count it once anyway).
    setpgid(0, 0);
    dup2(pipefd[1], STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    for (auto& kv : env_kv) putenv(kv.data());
    if (!std::getenv("OMP_NUM_THREADS")) setenv("OMP_NUM_THREADS", std::to_string(omp_threads).c_str(), 1);
    auto cargs = as_c_strings(args);
    execv(cargs[0], cargs.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", cargs[0], std::strerror(errno));
    _exit(127);
  }
  close(pipefd[1]);
  fcntl(pipefd[0], F_SETFL, fcntl(pipefd[0], F_GETFL) | O_NONBLOCK);
  c.pid = pid;
  c.err_fd = pipefd[0];
}

}  // namespace

int launch_local_ranks(const std::vector<std::string>& child_argv, const LaunchOptions& opts) {
  RZ_CHECK(!child_argv.empty(), "launcher: no command to run");
  // Bounded as threads are (base/checked.h): more ranks than 4 per core only thrash, each
  // holds its own model and buffers, and a typo (1000) would start processes until memory
  // runs out. Each rank then checks its share of the memory (train/loop.cpp).
  RZ_CHECK(opts.nproc_per_node >= 1 && opts.nproc_per_node <= max_threads(),
           "--nproc-per-node: expected 1..%d ranks (%d per core, %d cores on this machine), found %d", max_threads(),
           kThreadsPerCore, online_cores(), opts.nproc_per_node);
  RZ_CHECK(opts.nnodes >= 1, "--nnodes must be at least 1, got %d", opts.nnodes);
  RZ_CHECK(opts.node_rank >= 0 && opts.node_rank < opts.nnodes,
           "--node-rank must be in 0..%d, got %d", opts.nnodes - 1, opts.node_rank);
  const JobAddress job = job_address(opts);
  const int world = opts.nnodes * opts.nproc_per_node;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int omp_threads = static_cast<int>(std::max(1L, cores / opts.nproc_per_node));

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_stop_signal = 0;
  g_stop_again = 0;

  // A per-launch nonce lets the store refuse ranks of another job that shares the port and
  // token. Nodes of a multi-node job are launched separately and cannot share one.
  const std::string nonce = opts.nnodes == 1 ? random_job_token() : "";
  const pid_t launcher_pid = getpid();
  std::vector<Child> children;
  children.reserve(static_cast<size_t>(opts.nproc_per_node));
  // Starting stops at the first failure: a signal (passed on to the ranks started), a rank
  // that already failed, or a rank that cannot be started (no memory, a process limit).
  std::string start_error;
  for (int local = 0; local < opts.nproc_per_node; ++local) {
    if (g_stop_signal != 0) break;
    if (reap(children) < static_cast<int>(children.size()) &&
        std::any_of(children.begin(), children.end(), [](const Child& c) { return !c.running && c.status != 0; }))
      break;
    Child c;
    c.rank = opts.node_rank * opts.nproc_per_node + local;
    std::vector<std::string> env_kv = {
        "RANK=" + std::to_string(c.rank),
        "WORLD_SIZE=" + std::to_string(world),
        "LOCAL_RANK=" + std::to_string(local),
        "LOCAL_WORLD_SIZE=" + std::to_string(opts.nproc_per_node),
        "MASTER_ADDR=" + opts.master_addr,
        "MASTER_PORT=" + std::to_string(job.port),
        "RINGZERO_JOB_TOKEN=" + job.token,
        "RINGZERO_LAUNCHED=1",
    };
    if (!nonce.empty()) env_kv.push_back("RINGZERO_JOB_NONCE=" + nonce);
    try {
      start_rank(c, child_argv, env_kv, omp_threads, launcher_pid);
    } catch (const Error& e) {
      start_error = strfmt("could not start rank %d of %d: %s", c.rank, world, e.what());
      break;
    }
    children.push_back(std::move(c));
  }
  if (!start_error.empty()) signal_running(children, SIGTERM);  // they would wait for the missing rank

  watch_children(children, opts);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!start_error.empty()) {
    std::fprintf(stderr, "ringzero: %s; stopped the %zu rank(s) already started\n", start_error.c_str(),
                 children.size());
    return 1;
  }
  return report_children(children);
}

}  // namespace rz
