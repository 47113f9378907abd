// data/bpe.cpp: GPT-2's byte-level BPE tokenizer (encoder.json + vocab.bpe).
//
// Terms, as in OpenAI's encoder.py:
//   byte map   GPT-2 shows each byte as a printable code point: the 188 printable Latin-1
//              bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') as themselves, the other 68 as U+0100 + k
//              in byte order. encoder.json and vocab.bpe spell tokens in these characters.
//   pre-token  a piece of text cut by GPT-2's pattern (data/pretokenize.cpp); BPE never merges
//              across pre-tokens.
//   merge      a line "A B" of vocab.bpe; its rank is its line number (lower merges first).
// Encoding a pre-token: start from one token per byte; repeatedly take the adjacent pair
// with the lowest merge rank and merge every occurrence of it, left to right, until no
// adjacent pair has a rank. Working on token ids instead of strings gives the same result
// because the vocabulary maps strings to ids one to one. Pre-tokens repeat a lot in real
// text, so the ids of each are cached (bounded; cleared when full).
#include <cstring>
#include <fstream>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace rz {

namespace {

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// byte -> the UTF-8 spelling of its byte-map code point.
std::vector<std::string> byte_map_strings() {
  std::vector<std::string> out(256);
  int k = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(&out[b], printable ? static_cast<uint32_t>(b) : 0x100u + k++);
  }
  return out;
}

// Eight bytes at a time, each step a multiply and a xor-shift (pre-tokens are short).
uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

// Open-addressing cache: pre-token bytes -> token ids. Keys and ids live in two flat arenas.
class WordCache {
 public:
  WordCache() { clear(); }
  // Returns true and sets *ids, *count when word is cached.
  bool find(std::string_view word, uint64_t h, const int** ids, uint32_t* count) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      uint32_t e = slots_[i];
      if (e == 0) return false;
      const Entry& en = entries_[e - 1];
      if (en.hash == h && en.key_len == word.size() &&
          std::memcmp(keys_.data() + en.key_off, word.data(), word.size()) == 0) {
        *ids = toks_.data() + en.tok_off;
        *count = en.tok_len;
        return true;
      }
    }
  }
  void insert(std::string_view word, uint64_t h, const int* ids, uint32_t count) {
    if (entries_.size() + 1 > kMaxEntries || keys_.size() + word.size() > kMaxKeyBytes) clear();
    Entry en{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
             static_cast<uint32_t>(toks_.size()), count};
    keys_.append(word);
    toks_.insert(toks_.end(), ids, ids + count);
    entries_.push_back(en);
    size_t i = h & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = static_cast<uint32_t>(entries_.size());
  }

 private:
  static constexpr size_t kSlots = 1u << 20;
  static constexpr size_t kMaxEntries = kSlots / 2;     // load factor <= 0.5
  static constexpr size_t kMaxKeyBytes = 32u << 20;     // bounds memory on odd inputs
  static constexpr size_t mask_ = kSlots - 1;
  struct Entry {
    uint64_t hash;
    uint32_t key_off, key_len, tok_off, tok_len;
  };
  void clear() {
    slots_.assign(kSlots, 0);
    entries_.clear();
    keys_.clear();
    toks_.clear();
  }
  std::vector<uint32_t> slots_;  // 1 + index into entries_, 0 = empty
  std::vector<Entry> entries_;
  std::string keys_;
  std::vector<int> toks_;
};

std::string read_text_file(const std::string& path) {
  check_input_file(path, "GPT-2 tokenizer file");
  std::ifstream f(path, std::ios::binary);
  RZ_CHECK(f.good(), "%s: cannot open (expected a GPT-2 tokenizer file)", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Gpt2Tokenizer final : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(const std::string& dir) {
    load_encoder(dir + "/encoder.json");
    load_merges(dir + "/vocab.bpe");
  }

  std::string name() const override { return "gpt2"; }
  int vocab_size() const override { return static_cast<int>(decoder_.size()); }
  int eot() const override { return eot_; }

  std::vector<int> encode(std::string_view text) const override {
    std::vector<int> out;
    encode_stream(text, true, &out);
    return out;
  }

  size_t encode_stream(std::string_view text, bool final, std::vector<int>* out) const override {
    std::lock_guard<std::mutex> lock(mu_);  // the cache and scratch are shared
    ends_.clear();
    size_t done = pretokenize(text, final, &ends_);
    size_t start = 0;
    for (uint32_t end : ends_) {
      encode_word(text.substr(start, end - start), out);
      start = end;
    }
    return done;
  }

  std::string decode(const std::vector<int>& tokens) const override {
    std::string out;
    for (int t : tokens) out += decode_token(t);
    return out;
  }
  std::string decode_token(int token) const override {
    RZ_CHECK(token >= 0 && token < vocab_size(), "token id %d outside [0, %d) of the gpt2 tokenizer",
             token, vocab_size());
    return decoder_[token];
  }

 private:
  struct Merge {
    int rank;
    int id;  // the merged token
  };
  static uint64_t pair_key(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void load_encoder(const std::string& path) {
    std::string text = read_text_file(path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      RZ_FAIL("%s: malformed JSON (expected GPT-2's encoder.json): %s", path.c_str(), e.what());
    }
    RZ_CHECK(j.is_object() && !j.empty(), "%s: expected a JSON object of token -> id, found %s",
             path.c_str(), j.type_name());
    size_t n = j.size();
    RZ_CHECK(n <= 65536, "%s: %zu tokens; shards store uint16 ids, so at most 65536", path.c_str(), n);
    decoder_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    std::vector<std::string> bmap = byte_map_strings();
    std::unordered_map<std::string, int> unmap;  // byte-map code point -> byte
    for (int b = 0; b < 256; b++) unmap[bmap[b]] = b;
    for (auto it = j.begin(); it != j.end(); ++it) {
      RZ_CHECK(it.value().is_number_integer(), "%s: token \"%s\": expected an integer id, found %s",
               path.c_str(), it.key().c_str(), it.value().type_name());
      long long id = it.value().get<long long>();
      RZ_CHECK(id >= 0 && id < static_cast<long long>(n) && !seen[id],
               "%s: token \"%s\": id %lld is out of [0, %zu) or repeated (ids must be 0..N-1)",
               path.c_str(), it.key().c_str(), id, n);
      seen[id] = true;
      encoder_[it.key()] = static_cast<int>(id);
      // Spell the token back as raw bytes, one byte-map character at a time.
      const std::string& k = it.key();
      std::string& bytes = decoder_[id];
      for (size_t i = 0; i < k.size();) {
        size_t len = (static_cast<unsigned char>(k[i]) < 0x80) ? 1 : (static_cast<unsigned char>(k[i]) < 0xE0) ? 2 : 3;
        auto u = unmap.find(k.substr(i, len));
        if (u == unmap.end()) {  // not byte-mapped (special tokens): keep as written
          bytes = k;
          break;
        }
        bytes.push_back(static_cast<char>(u->second));
        i += len;
      }
    }
    for (int b = 0; b < 256; b++) {
      auto it = encoder_.find(bmap[b]);
      RZ_CHECK(it != encoder_.end(), "%s: no token for byte 0x%02X (expected \"%s\")", path.c_str(), b,
               bmap[b].c_str());
      byte_token_[b] = it->second;
    }
    auto e = encoder_.find("<|endoftext|>");
    RZ_CHECK(e != encoder_.end(), "%s: no \"<|endoftext|>\" token", path.c_str());
    eot_ = e->second;
  }

  void load_merges(const std::string& path) {
    std::string text = read_text_file(path);
    std::istringstream in(text);
    std::string line;
    int lineno = 0, rank = 0;
    while (std::getline(in, line)) {
      lineno++;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
      size_t sp = line.find(' ');
      RZ_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() &&
                   line.find(' ', sp + 1) == std::string::npos,
               "%s:%d: expected a merge \"A B\", found \"%s\"", path.c_str(), lineno, line.c_str());
      std::string a = line.substr(0, sp), b = line.substr(sp + 1);
      auto ia = encoder_.find(a), ib = encoder_.find(b), iab = encoder_.find(a + b);
      RZ_CHECK(ia != encoder_.end() && ib != encoder_.end() && iab != encoder_.end(),
               "%s:%d: merge \"%s\" uses or makes a token that encoder.json lacks", path.c_str(),
               lineno, line.c_str());
      // A repeated pair keeps its first (lowest) rank, as a dict built in file order would not;
      // GPT-2's file has no repeats.
      merges_.emplace(pair_key(ia->second, ib->second), Merge{rank++, iab->second});
    }
    RZ_CHECK(rank > 0, "%s: no merges found (expected GPT-2's vocab.bpe)", path.c_str());
  }

  void encode_word(std::string_view word, std::vector<int>* out) const {
    if (word.size() == 1) {
      out->push_back(byte_token_[static_cast<unsigned char>(word[0])]);
      return;
    }
    uint64_t h = hash_bytes(word.data(), word.size());
    const int* ids;
    uint32_t count;
    if (cache_.find(word, h, &ids, &count)) {
      out->insert(out->end(), ids, ids + count);
      return;
    }
    std::vector<int>& w = scratch_;
    w.clear();
    for (char c : word) w.push_back(byte_token_[static_cast<unsigned char>(c)]);
    if (w.size() > kLongWord) merge_long(&w);
    while (w.size() >= 2) {
      int best_rank = -1, best_id = -1;
      size_t best_i = 0;
      for (size_t i = 0; i + 1 < w.size(); i++) {
        auto it = merges_.find(pair_key(w[i], w[i + 1]));
        if (it != merges_.end() && (best_rank < 0 || it->second.rank < best_rank)) {
          best_rank = it->second.rank;
          best_id = it->second.id;
          best_i = i;
        }
      }
      if (best_rank < 0) break;
      int a = w[best_i], b = w[best_i + 1];
      size_t o = best_i;  // merge every (a, b) left to right from the first one
      for (size_t i = best_i; i < w.size();) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          w[o++] = best_id;
          i += 2;
        } else {
          w[o++] = w[i++];
        }
      }
      w.resize(o);
    }
    cache_.insert(word, h, w.data(), static_cast<uint32_t>(w.size()));
    out->insert(out->end(), w.begin(), w.end());
  }

  // Long pre-tokens (a megabyte of letters without a space) would make the rescanning loop
  // above quadratic. For them: a heap of candidate pairs ordered by (rank, position), popped
  // lowest first, with stale entries skipped. It performs the same merges as the loop as long
  // as a merge's result only takes part in later (higher-ranked) merges, which holds for a
  // vocab.bpe learned in order such as GPT-2's.
  static constexpr size_t kLongWord = 256;
  void merge_long(std::vector<int>* w) const {
    size_t n = w->size();
    std::vector<int>& id = *w;
    std::vector<int32_t> prev(n), next(n);  // -1: none
    for (size_t i = 0; i < n; i++) {
      prev[i] = static_cast<int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    struct Cand {
      int rank;
      int32_t pos;
      int left, right;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int32_t i) {
      if (i < 0 || next[i] < 0) return;
      auto it = merges_.find(pair_key(id[i], id[next[i]]));
      if (it != merges_.end()) heap.push(Cand{it->second.rank, i, id[i], id[next[i]]});
    };
    for (size_t i = 0; i + 1 < n; i++) push(static_cast<int32_t>(i));
    std::vector<bool> dead(n, false);
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      int32_t i = c.pos;
      if (dead[i] || next[i] < 0 || id[i] != c.left || id[next[i]] != c.right) continue;  // stale
      int32_t j = next[i];
      id[i] = merges_.find(pair_key(c.left, c.right))->second.id;
      dead[j] = true;
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      push(prev[i]);
      push(i);
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
      if (!dead[i]) id[o++] = id[i];
    w->resize(o);
  }

  std::unordered_map<std::string, int> encoder_;  // byte-mapped spelling -> id
  std::vector<std::string> decoder_;              // id -> raw bytes
  std::unordered_map<uint64_t, Merge> merges_;    // (left id, right id) -> rank, merged id
  int byte_token_[256] = {};
  int eot_ = -1;
  mutable std::mutex mu_;
  mutable WordCache cache_;
  mutable std::vector<uint32_t> ends_;
  mutable std::vector<int> scratch_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& dir) {
  return std::make_unique<Gpt2Tokenizer>(dir);
}

}  // namespace rz
