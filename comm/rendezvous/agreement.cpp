// comm/rendezvous/agreement.cpp: settings every rank shares (the protocol is in agreement.h).
#include "comm/rendezvous/agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "base/check.h"
#include "comm/rendezvous/socket.h"

namespace rz {
namespace {

constexpr const char* kMagic = "ringzero-settings 1";
constexpr size_t kShownChars = 160;  // a value longer than this is cut in the error line

// A value as an error line shows it: control characters escaped, at most kShownChars.
std::string shown(std::string_view v) {
  std::string out;
  for (unsigned char c : v) {
    if (out.size() >= kShownChars) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f) out += strfmt("\\x%02x", c);
    else out += static_cast<char>(c);
  }
  return out.empty() ? std::string("''") : out;
}

std::vector<std::string_view> items(std::string_view v) {
  std::vector<std::string_view> out;
  for (size_t pos = 0;;) {
    const size_t end = v.find("; ", pos);
    out.push_back(v.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    if (end == std::string_view::npos) return out;
    pos = end + 2;
  }
}

std::string value_difference(int rank, const std::string& key, const std::string& theirs, const std::string& zeros) {
  const std::string name = shown(key);
  const std::vector<std::string_view> a = items(theirs), b = items(zeros);
  if (a.size() == 1 && b.size() == 1)
    return strfmt("rank %d's %s %s differs from rank 0's %s; every rank of a job must be given the same %s", rank,
                  name.c_str(), shown(theirs).c_str(), shown(zeros).c_str(), name.c_str());
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto item = [&](const std::vector<std::string_view>& v) {
    return i < v.size() ? shown(v[i]) : std::string("nothing more");
  };
  return strfmt("rank %d's %s differs from rank 0's (%zu item(s) against %zu): item %zu is %s on rank %d, %s on rank 0; "
                "every rank of a job must be given the same %s",
                rank, name.c_str(), a.size(), b.size(), i + 1, item(a).c_str(), rank, item(b).c_str(), name.c_str());
}

void escape_into(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
}

std::optional<std::string> unescape(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '\\') {
      out += v[i];
      continue;
    }
    if (++i == v.size()) return std::nullopt;
    if (v[i] == '\\') out += '\\';
    else if (v[i] == 'n') out += '\n';
    else if (v[i] == 't') out += '\t';
    else return std::nullopt;
  }
  return out;
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Collectives move fp32: 16 bits per float are exact, whatever the bit pattern.
void put_u16s(std::vector<float>& out, uint64_t v, int words) {
  for (int i = 0; i < words; ++i) out.push_back(static_cast<float>((v >> (16 * i)) & 0xffff));
}

}  // namespace

std::string encode_rank_settings(const RankSettings& s) {
  std::string out = strfmt("%s\nworld %d\n", kMagic, s.world);
  for (const auto& [name, value] : s.settings) {
    escape_into(out, name);
    out += '\t';
    escape_into(out, value);
    out += '\n';
  }
  return out;
}

std::optional<RankSettings> decode_rank_settings(std::string_view text) {
  RankSettings s;
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return std::nullopt;  // every line ends in '\n'
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  if (lines.size() < 2 || lines[0] != kMagic || lines[1].substr(0, 6) != "world ") return std::nullopt;
  const std::string w(lines[1].substr(6));
  char* end = nullptr;
  const long world = std::strtol(w.c_str(), &end, 10);
  if (w.empty() || *end != '\0' || world < 1 || world > (1 << 20)) return std::nullopt;
  s.world = static_cast<int>(world);
  std::set<std::string> names;  // a rank publishes each setting once: a name twice is malformed
  for (size_t i = 2; i < lines.size(); ++i) {
    const size_t tab = lines[i].find('\t');
    if (tab == std::string_view::npos) return std::nullopt;
    auto name = unescape(lines[i].substr(0, tab));
    auto value = unescape(lines[i].substr(tab + 1));
    if (!name || !value || name->empty() || !names.insert(*name).second) return std::nullopt;
    s.settings.emplace_back(std::move(*name), std::move(*value));
  }
  return s;
}

std::string settings_difference(int rank, const RankSettings& theirs, const RankSettings& rank0) {
  if (theirs.world != rank0.world)
    return strfmt("rank %d was started with WORLD_SIZE %d, rank 0 with %d; every rank of a job must be given the same "
                  "world size (--nnodes x --nproc-per-node)",
                  rank, theirs.world, rank0.world);
  for (const auto& [name, zeros] : rank0.settings) {
    const std::string* mine = nullptr;
    for (const auto& [n, v] : theirs.settings)
      if (n == name) mine = &v;
    if (mine == nullptr)
      return strfmt("rank %d has no setting %s, which rank 0 has %s (different ringzero builds?)", rank,
                    shown(name).c_str(), shown(zeros).c_str());
    if (*mine != zeros) return value_difference(rank, name, *mine, zeros);
  }
  for (const auto& [n, v] : theirs.settings) {
    bool known = false;
    for (const auto& [name, zeros] : rank0.settings) known = known || name == n;
    if (!known)
      return strfmt("rank %d has a setting %s %s that rank 0 does not have (different ringzero builds?)", rank,
                    shown(n).c_str(), shown(v).c_str());
  }
  return "";
}

void agree_at_rendezvous(StoreClient& store, int rank, const RankSettings& mine, double timeout_s) {
  store.set(strfmt("agree/%d", rank), encode_rank_settings(mine));
  auto decoded = [&](int r, const std::string& text) {
    std::optional<RankSettings> s = decode_rank_settings(text);
    RZ_CHECK(s.has_value(), "rendezvous: rank %d published malformed settings (%zu bytes): a different ringzero?", r,
             text.size());
    return *s;
  };
  if (rank != 0) {
    const RankSettings zeros = decoded(0, store.get("agree/0"));
    store.set(strfmt("agree/read/%d", rank), "");  // rank 0 may go now that this rank can name a difference
    const std::string diff = settings_difference(rank, mine, zeros);
    if (!diff.empty()) {
      try {  // rank 0 stops too (it may have seen the difference first and gone: the store with it)
        store.claim("agree/complaint", strfmt("%d\t", rank) + diff, nullptr);
      } catch (const Error&) {
      }
      RZ_FAIL("%s", diff.c_str());
    }
    const std::string verdict = store.get("agree/verdict");
    store.set(strfmt("agree/ack/%d", rank), "");
    RZ_CHECK(verdict == "OK", "%s", verdict.empty() ? "rendezvous: an empty verdict" : verdict.c_str() + 1);
    return;
  }
  // Rank 0: every other rank of its world, in the order they arrive, and any complaint.
  const int world = mine.world;
  std::vector<bool> seen(static_cast<size_t>(world), false);
  std::vector<int> agreed;  // ranks that agree with rank 0 and wait for the verdict
  seen[0] = true;
  int left = world - 1;
  std::string diff;
  int complainer = -1;
  const double deadline = now_s() + timeout_s;
  while (left > 0 && diff.empty()) {
    // A complaint from a rank outside this world (started for a larger job) is that rank's
    // own failure: rank 0's job of `world` ranks is whole without it and goes on.
    if (std::optional<std::string> c = store.try_get("agree/complaint", 0.0)) {
      const int from = std::atoi(c->c_str());
      if (from > 0 && from < world) {
        const size_t tab = c->find('\t');
        complainer = from;
        diff = tab == std::string::npos ? *c : c->substr(tab + 1);
        break;
      }
    }
    bool waited = false;
    for (int r = 1; r < world && diff.empty(); ++r) {
      if (seen[static_cast<size_t>(r)]) continue;
      // The first rank still missing is waited for briefly; the others only looked at.
      std::optional<std::string> v = store.try_get(strfmt("agree/%d", r), waited ? 0.0 : 0.05);
      waited = true;
      if (!v) continue;
      seen[static_cast<size_t>(r)] = true;
      --left;
      diff = settings_difference(r, decoded(r, *v), mine);
      if (diff.empty()) agreed.push_back(r);
      else complainer = r;  // it compares with agree/0 and fails by itself
    }
    if (diff.empty() && left > 0 && now_s() > deadline) {
      std::string missing;
      for (int r = 1; r < world; ++r)
        if (!seen[static_cast<size_t>(r)]) missing += strfmt("%s%d", missing.empty() ? "" : ", ", r);
      RZ_FAIL("rendezvous: rank 0 waited %.0f s for rank(s) %s of WORLD_SIZE %d to join: did every rank start, with "
              "the same MASTER_ADDR, MASTER_PORT and job token?",
              timeout_s, missing.c_str(), world);
    }
  }
  if (diff.empty()) {
    store.set("agree/verdict", "OK");
    return;
  }
  store.set("agree/verdict", "X" + diff);
  // The store goes when rank 0 fails. First (a few seconds at most) the ranks that agreed
  // with it read the verdict, and the one that differs reads agree/0, so that each names
  // the difference itself instead of "the store closed the connection".
  const double linger = now_s() + std::min(5.0, timeout_s);
  auto await_key = [&](const std::string& key) {
    while (now_s() < linger && !store.try_get(key, 0.05)) {
    }
  };
  for (int r : agreed) await_key(strfmt("agree/ack/%d", r));
  if (complainer > 0 && complainer < world && seen[static_cast<size_t>(complainer)])
    await_key(strfmt("agree/read/%d", complainer));
  RZ_FAIL("%s", diff.c_str());
}

void agree_by_collective(Communicator& comm, const SettingsToAgree& mine) {
  const int n = comm.size();
  if (n == 1) return;
  const std::string text = encode_rank_settings({n, mine});
  // Each rank's hash (4 x 16 bits) and length (2 x 16 bits): 6 floats per rank.
  std::vector<float> head;
  put_u16s(head, fnv1a64(text), 4);
  put_u16s(head, text.size(), 2);
  std::vector<float> heads(6 * static_cast<size_t>(n));
  comm.all_gather(head.data(), heads.data(), heads.size(), DType::f32);
  size_t longest = 0;
  bool same = true;
  for (int r = 0; r < n; ++r) {
    const float* h = heads.data() + 6 * static_cast<size_t>(r);
    same = same && std::equal(h, h + 4, heads.data());
    longest = std::max(longest, static_cast<size_t>(h[4]) | static_cast<size_t>(h[5]) << 16);
  }
  if (same) return;  // every rank decides alike: they all saw the same hashes
  // Rare: gather every rank's text (2 bytes per float) to name the difference the same way on all.
  const size_t words = (longest + 1) / 2;
  std::vector<float> mine_words(words, 0.0f), all(words * static_cast<size_t>(n));
  for (size_t i = 0; i < text.size(); ++i)
    mine_words[i / 2] += static_cast<float>(static_cast<unsigned char>(text[i]) << (8 * (i % 2)));
  comm.all_gather(mine_words.data(), all.data(), all.size(), DType::f32);
  auto text_of = [&](int r) {
    const float* w = all.data() + words * static_cast<size_t>(r);
    const float* h = heads.data() + 6 * static_cast<size_t>(r);
    const size_t len = static_cast<size_t>(h[4]) | static_cast<size_t>(h[5]) << 16;
    std::string s(len, '\0');
    for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>((static_cast<uint32_t>(w[i / 2]) >> (8 * (i % 2))) & 0xff);
    return s;
  };
  const std::optional<RankSettings> zeros = decode_rank_settings(text_of(0));
  RZ_CHECK(zeros.has_value(), "rank 0 sent malformed settings (a different ringzero?)");
  for (int r = 1; r < n; ++r) {
    const std::optional<RankSettings> theirs = decode_rank_settings(text_of(r));
    RZ_CHECK(theirs.has_value(), "rank %d sent malformed settings (a different ringzero?)", r);
    const std::string diff = settings_difference(r, *theirs, *zeros);
    if (!diff.empty()) RZ_FAIL("%s", diff.c_str());
  }
}

}  // namespace rz
