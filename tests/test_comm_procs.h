// tests/test_comm_procs.h: N ranks as forked processes (shm and tcp tests).
//
// fork() happens before the test process has any other threads; each child builds its
// RankEnv by hand (what the launcher would put in the environment), connects, runs the
// body and exits 0, or writes its error to a pipe and exits 1. The parent bounds the whole
// run with a deadline and kills stragglers, so a broken transport fails the test instead
// of hanging CI.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "base/check.h"
#include "comm/factory.h"
#include "comm/rendezvous/job_auth.h"
#include "launch/launch.h"
#include "test_comm_util.h"

namespace rz::testing {

struct RankResult {
  int status = -1;    // exit code, 128 + signal, or -1 if killed for running too long
  std::string error;  // what the rank wrote before exiting
};

// before_connect, when given, runs in each rank's process before it connects.
inline std::vector<RankResult> run_process_ranks(int nranks, const CommOptions& opts,
                                                 const std::function<void(Communicator&)>& body,
                                                 double deadline_s = 60.0,
                                                 const std::function<void()>& before_connect = {}) {
  const int port = pick_free_port();
  const std::string token = random_job_token();
  std::vector<pid_t> pids(nranks);
  std::vector<int> pipes(nranks);
  for (int r = 0; r < nranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      int code = 0;
      try {
        RankEnv env;
        env.rank = r;
        env.world_size = nranks;
        env.local_rank = r;
        env.master_port = port;
        env.job_token = token;
        if (before_connect) before_connect();
        auto comm = connect_communicator(env, opts);
        body(*comm);
      } catch (const std::exception& e) {
        std::string msg = e.what();
        ssize_t w = write(fds[1], msg.data(), msg.size());
        (void)w;
        code = 1;
      }
      close(fds[1]);
      _exit(code);
    }
    close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
  }
  std::vector<RankResult> results(nranks);
  auto t_end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  int left = nranks;
  std::vector<bool> done(nranks, false);
  while (left > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        results[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        done[r] = true;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > t_end) {
      for (int r = 0; r < nranks; ++r)
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          results[r].error = "killed: still running at the test's deadline";
          done[r] = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < nranks; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(pipes[r], buf, sizeof buf)) > 0) results[r].error.append(buf, static_cast<size_t>(n));
    close(pipes[r]);
  }
  return results;
}

// The process-rank checks shared by test_comm_shm and test_comm_tcp: every collective for
// N = 1..8 with 8-byte segments, and a 1 MiB AllReduce's byte count, over `transport`.
inline void check_transport_collectives(const std::string& transport) {
  for (int N = 1; N <= 8; ++N) {
    CommOptions o;
    o.transport = parse_comm_transport(transport);
    o.segment_bytes = 8;
    o.timeout_s = 30;
    auto results = run_process_ranks(N, o, [&](Communicator& c) {
      if (c.transport_name() != transport) throw Error("transport is " + c.transport_name());
      check_collectives(c, DType::f32);
      check_collectives(c, DType::bf16);
    });
    for (int r = 0; r < N; ++r) {
      INFO(transport << ", N = " << N << ", rank " << r << ": " << results[r].error);
      CHECK(results[r].status == 0);
    }
  }
}

inline void check_transport_allreduce_bytes(const std::string& transport) {
  const int N = 4;
  CommOptions o;
  o.transport = parse_comm_transport(transport);
  o.timeout_s = 30;
  auto results = run_process_ranks(N, o, [&](Communicator& c) {
    const size_t count = 1 << 18;
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = value_of(c.rank(), i);
    c.all_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
    for (size_t i = 0; i < count; i += 997)
      if (buf[i] != expected_reduce(N, i, ReduceOp::sum, DType::f32)) throw Error(strfmt("element %zu wrong", i));
    const auto& s = c.stats().by_kind[int(CollectiveKind::all_reduce)];
    if (s.bytes_sent != 2 * (N - 1) * count * 4 / N || s.bytes_recv != s.bytes_sent)
      throw Error(strfmt("sent %llu bytes", (unsigned long long)s.bytes_sent));
  });
  for (int r = 0; r < N; ++r) {
    INFO(transport << ", rank " << r << ": " << results[r].error);
    CHECK(results[r].status == 0);
  }
}

}  // namespace rz::testing
