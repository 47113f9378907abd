// comm/ring/comm_thread.h: issue order for a communicator's collectives (ring and mpi share it).
//
// Async collectives queue for one comm thread, started on first use, which runs them in
// the order they were issued. A blocking collective waits until the queue has drained and
// nothing runs, then runs on the caller's thread: no thread hand-off on the latency path,
// and still the issue order, because every earlier job has finished when it starts.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace rz {

class CommThread {
 public:
  using Job = std::function<void()>;

  CommThread() = default;
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  ~CommThread() { stop(); }

  // Runs what is queued, in order, then joins the thread. A communicator calls it first in
  // its destructor, while everything its jobs use is still alive.
  void stop();

  // Runs job on the caller's thread once every earlier job has finished; its exception, if
  // any, reaches the caller.
  void run_blocking(const Job& job);

  // Queues job for the comm thread. A job reports its own errors (through its Work handle)
  // and must not throw. The communicator counts as idle again only after the job returned,
  // so a job that finishes its handle inside lets a later blocking call find it done.
  void enqueue(Job job);

 private:
  void main();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rz
