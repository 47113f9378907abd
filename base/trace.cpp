// base/trace.cpp: the in-memory event list behind base/trace.h.
//
// Events are few (a window of a few steps: a span per layer and direction, one per
// collective), so one mutex-protected vector is enough; nothing here runs when no window
// is open. Device stamps (a rank with a DeviceClock) stay tickets in the events until
// resolve() reads them, so recording never waits for the device.
#include "base/trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
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
  Stamp t0, t1;  // a span's ends; a counter's moment is t0
  double value = 0;
  std::string args;
};

using Clock = std::chrono::steady_clock;

struct ClockRegistration {
  DeviceClock* clock = nullptr;
  double origin_us = 0;  // now_us() when the clock's origin was set
};

struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
  std::map<int, ClockRegistration> clocks;  // by rank
  Clock::time_point zero = Clock::now();
  size_t unresolved = 0;  // device stamps in events
  size_t in_hand = 0;     // device stamps given out by stamp() and not yet in an event (an open Scope's)
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

double since_zero_us(const Recorder& r) {
  return std::chrono::duration<double, std::micro>(Clock::now() - r.zero).count();
}

void set_origin_locked(Recorder& r, ClockRegistration& c) {
  c.clock->set_origin();
  c.origin_us = since_zero_us(r);
}

// Every device stamp of the events to host-clock microseconds; then the clocks recycle.
void resolve_locked(Recorder& r) {
  if (r.unresolved == 0) return;
  for (Event& e : r.events) {
    for (Stamp* st : {&e.t0, &e.t1}) {
      if (st->ticket < 0) continue;
      const ClockRegistration& c = r.clocks.at(e.rank);  // set_device_clock resolves before it clears
      st->host_us = c.origin_us + c.clock->since_origin_us(uint64_t(st->ticket));
      st->ticket = -1;
    }
  }
  r.unresolved = 0;
  // A ticket still in an open Scope must stay valid: recycle only when none is out.
  if (r.in_hand == 0)
    for (auto& [rank, c] : r.clocks) c.clock->recycle();
}

void record(Recorder& r, Event e) {
  const size_t tickets = size_t(e.t0.ticket >= 0) + size_t(e.t1.ticket >= 0);
  if (e.ph == 'C' && e.t0.ticket >= 0) {  // t1 is a copy of t0: one ticket
    r.in_hand -= std::min<size_t>(r.in_hand, 1);
    e.t1.ticket = -1;
  } else {
    r.in_hand -= std::min(r.in_hand, tickets);
  }
  if (tickets > 0 && r.clocks.count(e.rank) == 0) return;  // its clock was forgotten
  r.unresolved += size_t(e.t0.ticket >= 0) + size_t(e.t1.ticket >= 0);
  r.events.push_back(std::move(e));
}

}  // namespace

void start() {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> l(r.mu);
    r.events.clear();
    r.unresolved = 0;
    r.in_hand = 0;
    r.zero = Clock::now();
    for (auto& [rank, c] : r.clocks) set_origin_locked(r, c);
  }
  detail::g_enabled.store(true, std::memory_order_release);
}

void set_device_clock(int rank, DeviceClock* clock) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  auto it = r.clocks.find(rank);
  if (it != r.clocks.end() && it->second.clock == clock) return;
  if (it != r.clocks.end()) {
    resolve_locked(r);  // the old clock's stamps, while it is still registered
    r.clocks.erase(it);
  }
  if (clock == nullptr) return;
  ClockRegistration& c = r.clocks[rank];
  c.clock = clock;
  if (enabled()) set_origin_locked(r, c);
}

void forget_device_clock(DeviceClock* clock) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  for (auto it = r.clocks.begin(); it != r.clocks.end();) {
    if (it->second.clock != clock) {
      ++it;
      continue;
    }
    const int rank = it->first;
    // Their stamps can no longer be read: drop the events that wait for them.
    std::vector<Event> kept;
    for (Event& e : r.events) {
      const bool waiting = e.rank == rank && (e.t0.ticket >= 0 || e.t1.ticket >= 0);
      if (waiting) r.unresolved -= (e.t0.ticket >= 0) + (e.t1.ticket >= 0);
      else kept.push_back(std::move(e));
    }
    r.events = std::move(kept);
    it = r.clocks.erase(it);
  }
}

namespace {

// A device stamp from the rank's clock: on its compute stream (stream null) or on `stream`.
Stamp stamp_with(int rank, void* stream, bool on_stream) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  auto it = r.clocks.find(rank);
  if (it == r.clocks.end()) return Stamp{since_zero_us(r), -1};
  DeviceClock* clock = it->second.clock;
  const uint64_t ticket = on_stream ? clock->stamp_on(stream) : clock->stamp();
  ++r.in_hand;
  return Stamp{0.0, int64_t(ticket)};
}

}  // namespace

Stamp stamp(int rank) { return stamp_with(rank, nullptr, false); }
Stamp stamp_on(int rank, void* stream) { return stamp_with(rank, stream, true); }

void drop(Stamp s) {
  if (s.ticket < 0) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  r.in_hand -= std::min<size_t>(r.in_hand, 1);
}

void span(int rank, Track track, const std::string& name, Stamp begin, Stamp end, const std::string& args_json) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  record(r, Event{rank, 'X', track, name, begin, end, 0.0, args_json});
}

void counter(int rank, const std::string& name, Stamp at, double value) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  record(r, Event{rank, 'C', Track::compute, name, at, at, value, {}});
}

void resolve() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> l(r.mu);
  resolve_locked(r);
}

void stop() { detail::g_enabled.store(false, std::memory_order_release); }

double now_us() { return since_zero_us(recorder()); }

void set_thread_rank(int rank) { t_rank = rank; }
void set_process_rank(int rank) { g_process_rank.store(rank, std::memory_order_relaxed); }
int thread_rank() { return t_rank >= 0 ? t_rank : g_process_rank.load(std::memory_order_relaxed); }

void set_bucket(int bucket) { t_bucket = bucket; }
int bucket() { return t_bucket; }

void span(int rank, Track track, const std::string& name, double ts_us, double dur_us, const std::string& args_json) {
  span(rank, track, name, Stamp{ts_us, -1}, Stamp{ts_us + dur_us, -1}, args_json);
}

void counter(int rank, const std::string& name, double ts_us, double value) {
  counter(rank, name, Stamp{ts_us, -1}, value);
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
  resolve_locked(r);
  std::string out;
  for (const Event& e : r.events) {
    if (e.rank != rank) continue;
    if (!out.empty()) out += ",\n";
    out += "{\"ph\":\"";
    out += e.ph;
    out += "\",\"pid\":" + std::to_string(e.rank);
    out += ",\"name\":\"" + json_escape(e.name) + "\",\"ts\":" + number(e.t0.host_us);
    if (e.ph == 'X') {
      out += ",\"tid\":" + std::to_string(static_cast<int>(e.track));
      out += ",\"cat\":\"" + std::string(e.track == Track::comm ? "comm" : "compute") + "\"";
      out += ",\"dur\":" + number(e.t1.host_us - e.t0.host_us);
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
  const int rank = thread_rank();
  const Stamp t1 = stamp(rank);
  std::string name = name_;
  if (index_ >= 0) {
    name += ' ';
    name += std::to_string(index_);
  }
  span(rank, Track::compute, name, t0_, t1);
}

}  // namespace rz::trace
