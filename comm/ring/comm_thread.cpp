// comm/ring/comm_thread.cpp: see comm_thread.h.
#include "comm/ring/comm_thread.h"

#include <exception>
#include <utility>

namespace rz {

void CommThread::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void CommThread::run_blocking(const Job& job) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.empty() && !busy_; });
  busy_ = true;
  l.unlock();
  std::exception_ptr err;
  try {
    job();
  } catch (...) {
    err = std::current_exception();
  }
  l.lock();
  busy_ = false;
  cv_.notify_all();
  l.unlock();
  if (err) std::rethrow_exception(err);
}

void CommThread::enqueue(Job job) {
  std::lock_guard<std::mutex> l(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { main(); });
  queue_.push_back(std::move(job));
  cv_.notify_all();
}

void CommThread::main() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty()); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    job();
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
      cv_.notify_all();
    }
  }
}

}  // namespace rz
