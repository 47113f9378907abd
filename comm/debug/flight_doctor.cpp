// comm/debug/flight_doctor.cpp: reading flight records and saying what they show (flight_doctor.h).
#include "comm/debug/flight_doctor.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/check.h"

namespace rz {

namespace {

using nlohmann::json;

constexpr size_t kMaxRecordBytes = 64u << 20;  // 2^24 entries would be larger; a record is ~200 B per entry

// Typed field access: a present field of the wrong type is an error naming it.
std::string str_field(const json& o, const char* key, const std::string& name) {
  if (!o.contains(key)) return "";
  RZ_CHECK(o[key].is_string(), "%s: '%s' is not a string", name.c_str(), key);
  return o[key].get<std::string>();
}
template <typename T>
T num_field(const json& o, const char* key, T def, const std::string& name) {
  if (!o.contains(key)) return def;
  const json& v = o[key];
  RZ_CHECK(v.is_number(), "%s: '%s' is not a number", name.c_str(), key);
  if constexpr (std::is_floating_point_v<T>) {
    return v.get<T>();
  } else {
    RZ_CHECK(v.is_number_integer(), "%s: '%s' is not an integer", name.c_str(), key);
    if constexpr (std::is_unsigned_v<T>) {
      RZ_CHECK(v.is_number_unsigned() || v.get<int64_t>() >= 0, "%s: '%s' is negative", name.c_str(), key);
      return static_cast<T>(v.get<uint64_t>());
    } else {
      const int64_t x = v.get<int64_t>();
      RZ_CHECK(x >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                   x <= static_cast<int64_t>(std::numeric_limits<T>::max()),
               "%s: '%s' is out of range", name.c_str(), key);
      return static_cast<T>(x);
    }
  }
}

std::string side_text(const json& s, const std::string& name) {
  RZ_CHECK(s.is_object(), "%s: mismatch side is not an object", name.c_str());
  std::string t = str_field(s, "op", name) + "(" + str_field(s, "dtype", name) +
                  strfmt(", count %llu", static_cast<unsigned long long>(num_field<uint64_t>(s, "count", 0, name)));
  if (const std::string r = str_field(s, "redop", name); !r.empty()) t += ", " + r;
  if (const int root = num_field<int>(s, "root", -1, name); root >= 0) t += strfmt(", root %d", root);
  return t + ")";
}

// 1048576 -> "1,048,576".
std::string grouped(uint64_t v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? (ranks.size() == 2 ? " and " : ", and ") : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

// "(gradients, bucket 7, step 112)" or "".
std::string context(const FlightRecordEntry& e) {
  std::vector<std::string> parts;
  if (!e.purpose.empty()) parts.push_back(e.purpose);
  if (e.bucket >= 0) parts.push_back(strfmt("bucket %d", e.bucket));
  if (e.step >= 0) parts.push_back(strfmt("step %lld", static_cast<long long>(e.step)));
  if (parts.empty()) return "";
  std::string s = " (";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s + ")";
}

std::string name_of(const FlightRecordEntry& e) { return e.op + strfmt(" #%llu", (unsigned long long)e.seq); }

// What must agree across ranks at one sequence number.
std::string program_key(const FlightRecordEntry& e) {
  return e.op + "|" + e.dtype + "|" + e.redop + "|" + std::to_string(e.count) + "|" + std::to_string(e.root) + "|" +
         e.purpose + "|" + std::to_string(e.bucket) + "|" + std::to_string(e.step);
}
// The same without the sequence-dependent count: two entries for the same purpose.
bool same_program(const FlightRecordEntry& a, const FlightRecordEntry& b) { return program_key(a) == program_key(b); }

std::string issued_text(const FlightRecordEntry& e) {
  return strfmt("%s%s with %s %s elements", name_of(e).c_str(), context(e).c_str(), grouped(e.count).c_str(),
                e.dtype.c_str());
}

std::string progress_text(const FlightRecordEntry& e) {
  if (e.round <= 0) return e.state == "issued" ? "not started" : "started";
  return strfmt("%s round %d of %d", e.phase.c_str(), e.round, e.rounds);
}

const FlightRecordEntry* find_entry(const FlightRecordFile& r, uint64_t seq) {
  auto it = std::lower_bound(r.entries.begin(), r.entries.end(), seq,
                             [](const FlightRecordEntry& e, uint64_t s) { return e.seq < s; });
  return it != r.entries.end() && it->seq == seq ? &*it : nullptr;
}

// The first sequence number where ranks' entries differ, as lines; empty when they agree.
// The smaller group (when there is one) goes into *culprits.
std::vector<std::string> program_disagreement(const std::map<int, const FlightRecordFile*>& by_rank,
                                              std::set<int>* culprits) {
  std::set<uint64_t> seqs;
  for (const auto& [r, f] : by_rank)
    for (const auto& e : f->entries) seqs.insert(e.seq);
  for (uint64_t seq : seqs) {
    std::map<std::string, std::vector<int>> groups;
    std::map<std::string, const FlightRecordEntry*> sample;
    for (const auto& [r, f] : by_rank)
      if (const FlightRecordEntry* e = find_entry(*f, seq)) {
        groups[program_key(*e)].push_back(r);
        sample[program_key(*e)] = e;
      }
    if (groups.size() < 2) continue;
    std::vector<std::pair<std::string, std::vector<int>>> g(groups.begin(), groups.end());
    std::sort(g.begin(), g.end(), [](const auto& a, const auto& b) {
      return a.second.size() != b.second.size() ? a.second.size() < b.second.size() : a.second < b.second;
    });
    std::string verdict;
    for (size_t i = 0; i < g.size(); ++i)
      verdict += (i ? "; " : "") + rank_list(g[i].second) + " issued " + issued_text(*sample[g[i].first]);
    std::vector<std::string> lines = {verdict + ": the ranks disagree on the program"};
    if (g[0].second.size() < g[1].second.size()) culprits->insert(g[0].second.begin(), g[0].second.end());
    // A rank that skipped one: its #seq is what the others run at #seq+1.
    if (g.size() == 2 && g[0].second.size() < g[1].second.size()) {
      const FlightRecordEntry& majority = *sample[g[1].first];
      const FlightRecordEntry& odd = *sample[g[0].first];
      const FlightRecordFile& other = *by_rank.at(g[1].second.front());
      if (const FlightRecordEntry* next = find_entry(other, seq + 1); next != nullptr && same_program(*next, odd))
        lines.push_back(strfmt("%s skipped %s%s: its #%llu is the others' #%llu", rank_list(g[0].second).c_str(),
                               name_of(majority).c_str(), context(majority).c_str(), (unsigned long long)seq,
                               (unsigned long long)(seq + 1)));
      else if (odd.op == majority.op && odd.count != majority.count && odd.purpose == majority.purpose &&
               odd.bucket == majority.bucket)
        lines.push_back(strfmt("%s sent %s elements where %s sent %s", rank_list(g[0].second).c_str(),
                               grouped(odd.count).c_str(), rank_list(g[1].second).c_str(),
                               grouped(majority.count).c_str()));
    }
    return lines;
  }
  return {};
}

}  // namespace

FlightRecordFile parse_flight_record(const std::string& text, const std::string& name) {
  RZ_CHECK(text.size() <= kMaxRecordBytes, "%s: %zu bytes is more than a flight record can be (%zu)", name.c_str(),
           text.size(), kMaxRecordBytes);
  json j = json::parse(text, nullptr, false);
  RZ_CHECK(!j.is_discarded() && j.is_object(), "%s: not a JSON object", name.c_str());
  RZ_CHECK(str_field(j, "format", name) == "ringzero-flight/1", "%s: not a ringzero flight record (format '%s')",
           name.c_str(), str_field(j, "format", name).c_str());
  FlightRecordFile f;
  f.file = name;
  f.rank = num_field<int>(j, "rank", -1, name);
  f.world = num_field<int>(j, "world", 0, name);
  RZ_CHECK(f.world >= 1 && f.world <= (1 << 20) && f.rank >= 0 && f.rank < f.world,
           "%s: rank %d of world %d is out of range", name.c_str(), f.rank, f.world);
  f.backend = str_field(j, "backend", name);
  f.transport = str_field(j, "transport", name);
  f.job = str_field(j, "job", name);
  f.reason = str_field(j, "reason", name);
  f.host = str_field(j, "host", name);
  f.where = str_field(j, "where", name);
  f.written_at = num_field<double>(j, "written_at", 0, name);
  f.issued = num_field<uint64_t>(j, "issued", 0, name);
  f.done = num_field<uint64_t>(j, "done", 0, name);
  if (j.contains("error")) {
    const json& e = j["error"];
    RZ_CHECK(e.is_object(), "%s: 'error' is not an object", name.c_str());
    f.error = str_field(e, "message", name);
    f.error_peer = num_field<int>(e, "peer", -1, name);
    f.error_seq = num_field<uint64_t>(e, "seq", 0, name);
  }
  if (j.contains("mismatch")) {
    const json& m = j["mismatch"];
    RZ_CHECK(m.is_object() && m.contains("mine") && m.contains("theirs"), "%s: 'mismatch' is malformed", name.c_str());
    f.has_mismatch = true;
    f.mismatch.seq = num_field<uint64_t>(m, "seq", 0, name);
    f.mismatch.other_rank = num_field<int>(m, "other_rank", -1, name);
    f.mismatch.mine = side_text(m["mine"], name);
    f.mismatch.theirs = side_text(m["theirs"], name);
  }
  RZ_CHECK(j.contains("entries") && j["entries"].is_array(), "%s: no 'entries' array", name.c_str());
  for (const json& o : j["entries"]) {
    RZ_CHECK(o.is_object(), "%s: an entry is not an object", name.c_str());
    FlightRecordEntry e;
    e.seq = num_field<uint64_t>(o, "seq", 0, name);
    RZ_CHECK(e.seq >= 1 && (f.entries.empty() || e.seq > f.entries.back().seq),
             "%s: entry seq %llu is out of order", name.c_str(), (unsigned long long)e.seq);
    e.op = str_field(o, "op", name);
    e.dtype = str_field(o, "dtype", name);
    e.redop = str_field(o, "redop", name);
    e.purpose = str_field(o, "purpose", name);
    e.state = str_field(o, "state", name);
    e.phase = str_field(o, "phase", name);
    e.count = num_field<uint64_t>(o, "count", 0, name);
    e.root = num_field<int>(o, "root", -1, name);
    e.bucket = num_field<int>(o, "bucket", -1, name);
    e.round = num_field<int>(o, "round", 0, name);
    e.rounds = num_field<int>(o, "rounds", 0, name);
    e.step = num_field<int64_t>(o, "step", -1, name);
    e.t_issue = num_field<double>(o, "t_issue", 0, name);
    e.t_start = num_field<double>(o, "t_start", 0, name);
    e.t_done = num_field<double>(o, "t_done", 0, name);
    f.entries.push_back(std::move(e));
  }
  return f;
}

namespace {

using ByRank = std::map<int, const FlightRecordFile*>;

// Who waits where, who never got there: the verdict on a hang, or empty when no collective
// is pending anywhere. Sets *culprits to the ranks it blames.
std::string hang_verdict(const ByRank& by_rank, const std::vector<int>& missing, std::set<int>* culprits) {
  // Each rank's first collective not done.
  std::map<uint64_t, std::vector<const FlightRecordFile*>> pending;  // seq -> ranks in it
  for (const auto& [r, f] : by_rank)
    if (f->done < f->issued && find_entry(*f, f->done + 1) != nullptr) pending[f->done + 1].push_back(f);
  if (pending.empty()) return "";
  // The collective the ranks are stuck in: the one most of them wait in, the earliest on a tie.
  uint64_t seq = 0;
  size_t most = 0;
  for (const auto& [s, fs] : pending)
    if (fs.size() > most) most = fs.size(), seq = s;
  const FlightRecordEntry& stuck = *find_entry(*pending[seq].front(), seq);
  std::vector<int> behind;  // ranks that never issued it
  for (const auto& [r, f] : by_rank)
    if (f->issued < seq) behind.push_back(r);
  culprits->insert(missing.begin(), missing.end());
  culprits->insert(behind.begin(), behind.end());

  std::string head;
  if (!behind.empty()) head = rank_list(behind) + " never issued " + name_of(stuck) + context(stuck);
  if (!missing.empty())
    head += (head.empty() ? "" : "; ") + rank_list(missing) +
            " left no record (stopped, killed, or stuck outside ringzero's collectives)";
  if (head.empty()) {  // everyone got there: the ranks the timeouts name did not take part
    std::set<int> named;
    for (const auto& [r, f] : by_rank)
      if (f->error_peer >= 0 && f->error.find("timed out") != std::string::npos) named.insert(f->error_peer);
    culprits->insert(named.begin(), named.end());
    head = named.empty() ? "every rank is in " + name_of(stuck) + context(stuck)
                         : rank_list(std::vector<int>(named.begin(), named.end())) + " did not take part in " +
                               name_of(stuck) + context(stuck) + " (the others timed out waiting)";
  } else if (behind.empty()) {
    head += "; in " + name_of(stuck) + context(stuck);
  }
  // "ranks 0 and 2 wait in it, reduce_scatter round 1 of 2", or where each one is.
  std::map<std::string, std::vector<int>> at;
  std::vector<int> in_it;
  for (const FlightRecordFile* f : pending[seq]) {
    at[progress_text(*find_entry(*f, seq))].push_back(f->rank);
    in_it.push_back(f->rank);
  }
  std::sort(in_it.begin(), in_it.end());
  std::string text = head + "; " + rank_list(in_it) + (in_it.size() == 1 ? " waits" : " wait") + " in it";
  if (at.size() == 1) {
    text += ", " + at.begin()->first;
  } else {
    int i = 0;
    for (const auto& [where, rs] : at) text += (i++ ? ", " : ": ") + rank_list(rs) + " at " + where;
  }
  // Ranks already past it, waiting in a later collective.
  for (const auto& [s, fs] : pending) {
    if (s == seq) continue;
    for (const FlightRecordFile* f : fs) {
      const FlightRecordEntry& e = *find_entry(*f, s);
      text += strfmt("; rank %d is in %s%s, %s", f->rank, name_of(e).c_str(), context(e).c_str(),
                     progress_text(e).c_str());
    }
  }
  return text;
}

}  // namespace

DoctorReport diagnose_flight_records(const std::vector<FlightRecordFile>& records) {
  DoctorReport rep;
  ByRank by_rank;
  int world = 0;
  for (const auto& r : records) {
    world = std::max(world, r.world);
    auto [it, fresh] = by_rank.emplace(r.rank, &r);
    if (!fresh && r.written_at > it->second->written_at) it->second = &r;
  }
  rep.records = static_cast<int>(by_rank.size());
  if (by_rank.empty()) {
    rep.lines.push_back("no flight records to read");
    return rep;
  }
  std::vector<int> missing, present;
  for (int q = 0; q < world; ++q) (by_rank.count(q) ? present : missing).push_back(q);

  // 1. --comm-debug's findings, then the entries side by side.
  std::vector<std::string>& lines = rep.lines;
  for (const auto& [r, f] : by_rank)
    if (f->has_mismatch) {
      lines.push_back(strfmt("rank %d caught a collective mismatch at #%llu (--comm-debug): rank %d runs %s, rank %d "
                             "runs %s: the ranks disagree on the program",
                             r, (unsigned long long)f->mismatch.seq, r, f->mismatch.mine.c_str(),
                             f->mismatch.other_rank, f->mismatch.theirs.c_str()));
      break;
    }
  std::set<int> culprits;
  for (auto& l : program_disagreement(by_rank, &culprits)) lines.push_back(l);

  // 2. A hang: who waits where, who never got there. A disagreement explains one: it stays
  //    first, and the hang follows only when a rank is missing or behind.
  const bool disagree = !lines.empty();
  std::set<int> hang_culprits;
  if (const std::string hang = hang_verdict(by_rank, missing, &hang_culprits); !hang.empty()) {
    if (!disagree) lines.push_back(hang);
    else if (!hang_culprits.empty() && hang.find("did not take part") == std::string::npos) lines.push_back("then: " + hang);
    culprits.insert(hang_culprits.begin(), hang_culprits.end());
  } else if (lines.empty()) {
    uint64_t last = 0;
    for (const auto& [r, f] : by_rank) last = std::max(last, f->issued);
    lines.push_back(strfmt("no collective is pending on %s: the last one issued is #%llu%s", rank_list(present).c_str(),
                           (unsigned long long)last,
                           missing.empty() ? "" : strfmt(" (%s left no record)", rank_list(missing).c_str()).c_str()));
  }
  // 3. One rank's own words: an error naming a rank the verdict blames, else the first
  //    timeout, else the first error that is not a knock-on (a neighbour's closed channel).
  const FlightRecordFile* quoted = nullptr;
  auto knock_on = [](const FlightRecordFile* f) { return f->error.find("closed the channel") != std::string::npos; };
  for (const auto& [r, f] : by_rank)
    if (quoted == nullptr && !f->error.empty() && culprits.count(f->error_peer) && !knock_on(f)) quoted = f;
  for (const auto& [r, f] : by_rank)
    if (quoted == nullptr && f->error.find("timed out") != std::string::npos) quoted = f;
  for (const auto& [r, f] : by_rank)
    if (quoted == nullptr && !f->error.empty() && !knock_on(f)) quoted = f;
  for (const auto& [r, f] : by_rank)
    if (quoted == nullptr && !f->error.empty()) quoted = f;
  if (quoted != nullptr) lines.push_back(strfmt("rank %d's error: %s", quoted->rank, quoted->error.c_str()));
  return rep;
}

DoctorReport diagnose_flight_dir(const std::string& dir, double newer_than) {
  namespace fs = std::filesystem;
  DoctorReport rep;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    rep.lines.push_back(dir + ": no such directory (no flight records)");
    return rep;
  }
  std::vector<FlightRecordFile> all;
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const std::string n = de.path().filename().string();
    if (n.rfind("rank", 0) == 0 && de.path().extension() == ".json") files.push_back(de.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    try {
      struct stat st {};
      RZ_CHECK(::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode), "%s: not a regular file", p.c_str());
      RZ_CHECK(static_cast<size_t>(st.st_size) <= kMaxRecordBytes, "%s: %lld bytes is more than a flight record can be",
               p.c_str(), static_cast<long long>(st.st_size));
      std::ifstream in(p, std::ios::binary);
      RZ_CHECK(in.good(), "%s: cannot read it", p.c_str());
      std::stringstream ss;
      ss << in.rdbuf();
      FlightRecordFile f = parse_flight_record(ss.str(), p.string());
      if (f.written_at >= newer_than) all.push_back(std::move(f));
    } catch (const std::exception& e) {
      rep.warnings.push_back(strfmt("skipped %s", e.what()));
    }
  }
  if (all.empty()) {
    rep.lines.push_back(dir + ": no flight records" + (newer_than > 0 ? " from this run" : ""));
    return rep;
  }
  // The newest job's records (a directory reused by several runs keeps the others' too).
  const auto newest = std::max_element(all.begin(), all.end(),
                                       [](const auto& a, const auto& b) { return a.written_at < b.written_at; });
  const std::string job = newest->job;
  std::vector<FlightRecordFile> mine;
  int other = 0;
  for (auto& f : all) {
    if (f.job == job) mine.push_back(std::move(f));
    else ++other;
  }
  DoctorReport d = diagnose_flight_records(mine);
  d.warnings.insert(d.warnings.begin(), rep.warnings.begin(), rep.warnings.end());
  if (other > 0) d.warnings.push_back(strfmt("%d record(s) of an older job in %s left out", other, dir.c_str()));
  return d;
}

}  // namespace rz
