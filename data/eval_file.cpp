// data/eval_file.cpp: llm.c's multiple-choice eval files (see eval_file.h).
#include "data/eval_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"

namespace rz {

namespace {

constexpr size_t kHeaderBytes = 256 * 4;
constexpr size_t kMaxFileBytes = size_t{1} << 30;
constexpr uint16_t kStartExample = 65535;
// The smallest example: start, size, index, label, count, context length, one context token,
// one completion of one token.
constexpr size_t kMinExampleWords = 9;

uint16_t word_at(std::string_view b, size_t i) {
  uint16_t w;
  std::memcpy(&w, b.data() + 2 * i, 2);  // little-endian files on a little-endian host
  return w;
}

}  // namespace

int EvalFile::longest_row() const {
  int longest = 0;
  for (const EvalExample& e : examples)
    for (const auto& c : e.completions)
      longest = std::max(longest, static_cast<int>(e.context.size() + c.size()) - 1);
  return longest;
}

EvalFile parse_eval_file(std::string_view bytes, const std::string& path) {
  const char* p = path.c_str();
  RZ_CHECK(bytes.size() >= kHeaderBytes, "eval file %s: %zu bytes, shorter than the 1024-byte header", p, bytes.size());
  int32_t h[256];
  std::memcpy(h, bytes.data(), kHeaderBytes);
  RZ_CHECK(h[0] == kEvalFileMagic, "eval file %s: magic %d, expected %d (llm.c's eval files, e.g. hellaswag_val.bin)",
           p, h[0], kEvalFileMagic);
  RZ_CHECK(h[1] == kEvalFileVersion, "eval file %s: version %d, expected %d", p, h[1], kEvalFileVersion);
  const std::string_view body = bytes.substr(kHeaderBytes);
  RZ_CHECK(body.size() % 2 == 0, "eval file %s: %zu bytes after the header, not a whole number of uint16", p,
           body.size());
  const size_t words = body.size() / 2;
  const int64_t n = h[2];
  RZ_CHECK(n >= 1 && static_cast<uint64_t>(n) * kMinExampleWords <= words,
           "eval file %s: header says %lld examples, but %zu bytes after the header hold at most %zu", p,
           static_cast<long long>(n), body.size(), words / kMinExampleWords);
  RZ_CHECK(h[3] > 0 && h[3] < 65536, "eval file %s: header's longest example %d bytes, expected 1..65535", p, h[3]);
  EvalFile f;
  f.longest_example_bytes = h[3];
  f.examples.reserve(static_cast<size_t>(n));
  size_t at = 0;  // in words
  int longest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const long long ex = i;
    RZ_CHECK(words - at >= 3, "eval file %s: example %lld: truncated (the file ends inside its header)", p, ex);
    RZ_CHECK(word_at(body, at) == kStartExample,
             "eval file %s: example %lld: found %u where the start-of-example mark 65535 should be (at byte %zu)", p,
             ex, word_at(body, at), kHeaderBytes + 2 * at);
    const size_t ebytes = word_at(body, at + 1);
    RZ_CHECK(ebytes % 2 == 0 && ebytes / 2 >= kMinExampleWords,
             "eval file %s: example %lld: size %zu bytes, expected an even number of at least %zu", p, ex, ebytes,
             2 * kMinExampleWords);
    RZ_CHECK(ebytes / 2 <= words - at, "eval file %s: example %lld: %zu bytes, but only %zu are left in the file", p, ex,
             ebytes, 2 * (words - at));
    RZ_CHECK(word_at(body, at + 2) == i, "eval file %s: example %lld: index %u, expected %lld (examples in order)", p, ex,
             word_at(body, at + 2), ex);
    const size_t end = at + ebytes / 2;
    size_t q = at + 3;
    // Reads the next word of this example, or fails naming what was being read.
    auto next = [&](const char* what) -> uint16_t {
      RZ_CHECK(q < end, "eval file %s: example %lld: its %zu bytes end inside its %s", p, ex, ebytes, what);
      return word_at(body, q++);
    };
    auto tokens = [&](const char* what) {
      const uint16_t len = next(what);
      RZ_CHECK(len >= 1, "eval file %s: example %lld: %s has no tokens", p, ex, what);
      RZ_CHECK(len <= end - q, "eval file %s: example %lld: %s has %u tokens, but only %zu words of the example are left",
               p, ex, what, len, end - q);
      std::vector<uint16_t> t(len);
      for (uint16_t k = 0; k < len; ++k) {
        t[k] = word_at(body, q + k);
        RZ_CHECK(t[k] != kStartExample, "eval file %s: example %lld: %s holds 65535, the start-of-example mark", p, ex,
                 what);
      }
      q += len;
      return t;
    };
    EvalExample e;
    e.index = static_cast<int>(i);
    e.label = next("label");
    const int count = next("completion count");
    RZ_CHECK(count >= 1 && count <= kEvalMaxCompletions, "eval file %s: example %lld: %d completions, expected 1..%d", p,
             ex, count, kEvalMaxCompletions);
    RZ_CHECK(e.label < count, "eval file %s: example %lld: label %d, but it has %d completions", p, ex, e.label, count);
    e.context = tokens("context");
    for (int c = 0; c < count; ++c) e.completions.push_back(tokens(strfmt("completion %d", c).c_str()));
    RZ_CHECK(q == end, "eval file %s: example %lld: %zu bytes are left after its last completion", p, ex, 2 * (end - q));
    longest = std::max(longest, static_cast<int>(ebytes));
    f.examples.push_back(std::move(e));
    at = end;
  }
  RZ_CHECK(at == words, "eval file %s: %zu bytes after its %lld examples", p, 2 * (words - at), static_cast<long long>(n));
  RZ_CHECK(longest == h[3], "eval file %s: header's longest example is %d bytes, but the longest is %d", p, h[3], longest);
  return f;
}

EvalFile read_eval_file(const std::string& path) {
  const int fd = open_input_file(path, "eval file");
  std::string bytes;
  try {
    struct stat st {};
    RZ_SYSCHECK(::fstat(fd, &st), "eval file %s: cannot stat", path.c_str());
    const size_t size = static_cast<size_t>(st.st_size);
    RZ_CHECK(size <= kMaxFileBytes, "eval file %s: %zu bytes, more than the %zu an eval file may have", path.c_str(),
             size, kMaxFileBytes);
    resize_or_fail(bytes, size, "the eval file");
    size_t got = 0;
    while (got < size) {
      const ssize_t r = ::read(fd, bytes.data() + got, size - got);
      if (r < 0 && errno == EINTR) continue;
      RZ_CHECK(r > 0, "eval file %s: read failed: %s", path.c_str(), r < 0 ? errno_string().c_str() : "it shrank");
      got += static_cast<size_t>(r);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return parse_eval_file(bytes, path);
}

void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples) {
  RZ_CHECK(!examples.empty() && examples.size() < 65535, "%s: %zu examples, expected 1..65534", path.c_str(),
           examples.size());
  std::vector<uint16_t> stream;
  int longest = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const EvalExample& e = examples[i];
    const size_t start = stream.size();
    stream.insert(stream.end(), {kStartExample, 0, static_cast<uint16_t>(i), static_cast<uint16_t>(e.label),
                                 static_cast<uint16_t>(e.completions.size()), static_cast<uint16_t>(e.context.size())});
    stream.insert(stream.end(), e.context.begin(), e.context.end());
    for (const auto& c : e.completions) {
      stream.push_back(static_cast<uint16_t>(c.size()));
      stream.insert(stream.end(), c.begin(), c.end());
    }
    const size_t bytes = 2 * (stream.size() - start);
    RZ_CHECK(bytes < 65536, "%s: example %zu is %zu bytes, more than a uint16 can say", path.c_str(), i, bytes);
    stream[start + 1] = static_cast<uint16_t>(bytes);
    longest = std::max(longest, static_cast<int>(bytes));
  }
  int32_t h[256] = {};
  h[0] = kEvalFileMagic;
  h[1] = kEvalFileVersion;
  h[2] = static_cast<int32_t>(examples.size());
  h[3] = longest;
  write_file_atomic(path, {{h, sizeof(h)}, {stream.data(), stream.size() * 2}});
}

}  // namespace rz
