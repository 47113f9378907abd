// base/trace.cpp: the in-memory event list behind base/trace.h.
//
// Events are few (a window of a few steps: a span per layer and direction, one per
// collective), so one mutex-protected vector is enough; nothing here runs when no window
// is open.
#include "base/trace.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

namespace rz::trace {

namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

struct Event {
  int rank = 0;
  char ph = 'X';  // 'X' span, 'C' counter
  Track track = Track::compute;
  std::string name;
  double ts_us = 0, dur_us = 0, value = 0;
  std::string args;
};

using Clock = std::chrono::steady_clock;

struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
  Clock::time_point zero = Clock::now();
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

std::atomic<int> g_process_rank{0};
thread_local int t_rank = -1;
thread_local int t_bucket = -1;

std::string number(double x) {
  if (!std::isfinite(x)) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

}  // namespace

void start() {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> l(r.mu);
    r.events.clear();
    r.zero = Clock::now();
  }
  detail::g_enabled.store(true, std::memory_order_release);
}

void stop() { detail::g_enabled.store(false, std::memory_order_release); }

double now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now() - recorder().zero).count();
}

void set_thread_rank(int rank) { t_rank = rank; }
void set_process_rank(int rank) { g_process_rank.store(rank, std::memory_order_relaxed); }
int thread_rank() { return t_rank >= 0 ? t_rank : g_process_rank.load(std::memory_order_relaxed); }

void set_bucket(int bucket) { t_bucket = bucket; }
int bucket() { return t_bucket; }

void span(int rank, Track track, const std::string& name, double ts_us, double dur_us, const std::string& args_json) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  r.events.push_back(Event{rank, 'X', track, name, ts_us, dur_us, 0.0, args_json});
}

void counter(int rank, const std::string& name, double ts_us, double value) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  r.events.push_back(Event{rank, 'C', Track::compute, name, ts_us, 0.0, value, {}});
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string rank_events_json(int rank) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  std::string out;
  for (const Event& e : r.events) {
    if (e.rank != rank) continue;
    if (!out.empty()) out += ",\n";
    out += "{\"ph\":\"";
    out += e.ph;
    out += "\",\"pid\":" + std::to_string(e.rank);
    out += ",\"name\":\"" + json_escape(e.name) + "\",\"ts\":" + number(e.ts_us);
    if (e.ph == 'X') {
      out += ",\"tid\":" + std::to_string(static_cast<int>(e.track));
      out += ",\"cat\":\"" + std::string(e.track == Track::comm ? "comm" : "compute") + "\"";
      out += ",\"dur\":" + number(e.dur_us);
      if (!e.args.empty()) out += ",\"args\":{" + e.args + "}";
    } else {
      out += ",\"args\":{\"value\":" + number(e.value) + "}";
    }
    out += "}";
  }
  return out;
}

size_t count_spans(int rank, Track track) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  size_t n = 0;
  for (const Event& e : r.events) n += e.rank == rank && e.ph == 'X' && e.track == track;
  return n;
}

void Scope::finish() {
  const double t1 = now_us();
  std::string name = name_;
  if (index_ >= 0) {
    name += ' ';
    name += std::to_string(index_);
  }
  span(thread_rank(), Track::compute, name, t0_, t1 - t0_);
}

}  // namespace rz::trace
