// data/tokenizer.cpp: the byte tokenizer, llm.c's tokenizer.bin, and make_tokenizer().
//
// tokenizer.bin (llm.c, train_gpt2.py write_tokenizer): a header of 256 int32 little-endian
// (magic 20240328, version, vocab size, EOT id; version 1 has no EOT field and means GPT-2's
// 50256), then every token in id order as one length byte (1..255) and that many bytes.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace rz {

namespace {

constexpr int kTokenizerMagic = 20240328;
const char kEotText[] = "<|endoftext|>";

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int vocab_size() const override { return 257; }
  int eot() const override { return 256; }
  std::vector<int> encode(std::string_view text) const override {
    std::vector<int> out(text.size());
    for (size_t i = 0; i < text.size(); i++) out[i] = static_cast<unsigned char>(text[i]);
    return out;
  }
  std::string decode(const std::vector<int>& tokens) const override {
    std::string out;
    out.reserve(tokens.size());
    for (int t : tokens) {
      if (t >= 0 && t < 256) out.push_back(static_cast<char>(t));
      else out += decode_token(t);
    }
    return out;
  }
  std::string decode_token(int token) const override {
    RZ_CHECK(token >= 0 && token < 257, "token id %d outside [0, 257) of the byte tokenizer", token);
    if (token == 256) return kEotText;
    return std::string(1, static_cast<char>(token));
  }
};

class LlmcTokenizer final : public Tokenizer {
 public:
  explicit LlmcTokenizer(const std::string& path) : path_(path) {
    check_input_file(path, "tokenizer");
    FILE* f = std::fopen(path.c_str(), "rb");
    RZ_CHECK(f != nullptr, "%s: cannot open (expected an llm.c tokenizer.bin)", path.c_str());
    struct Closer {
      FILE* f;
      ~Closer() { std::fclose(f); }
    } closer{f};
    int32_t header[256];
    RZ_CHECK(std::fread(header, sizeof(int32_t), 256, f) == 256,
             "%s: shorter than the 1024-byte tokenizer.bin header", path.c_str());
    RZ_CHECK(header[0] == kTokenizerMagic, "%s: bad magic %d (expected %d: an llm.c tokenizer.bin)",
             path.c_str(), header[0], kTokenizerMagic);
    int version = header[1];
    RZ_CHECK(version == 1 || version == 2, "%s: version %d (expected 1 or 2)", path.c_str(), version);
    int vocab = header[2];
    RZ_CHECK(vocab > 0 && vocab <= 65536, "%s: vocab size %d (expected 1..65536)", path.c_str(), vocab);
    if (version == 1) {
      RZ_CHECK(vocab == 50257, "%s: version 1 is GPT-2's 50257 tokens only, found %d", path.c_str(), vocab);
      eot_ = 50256;
    } else {
      eot_ = header[3];
      RZ_CHECK(eot_ >= 0 && eot_ < vocab, "%s: EOT id %d outside [0, %d)", path.c_str(), eot_, vocab);
    }
    tokens_.resize(vocab);
    for (int i = 0; i < vocab; i++) {
      unsigned char len;
      RZ_CHECK(std::fread(&len, 1, 1, f) == 1, "%s: ends at token %d of %d", path.c_str(), i, vocab);
      RZ_CHECK(len > 0, "%s: token %d has length 0", path.c_str(), i);
      tokens_[i].resize(len);
      RZ_CHECK(std::fread(tokens_[i].data(), 1, len, f) == len, "%s: ends inside token %d of %d",
               path.c_str(), i, vocab);
    }
  }
  std::string name() const override { return "llmc"; }
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int eot() const override { return eot_; }
  std::vector<int> encode(std::string_view) const override {
    RZ_FAIL("%s: an llm.c tokenizer.bin can only decode; encode with --tokenizer byte or gpt2",
            path_.c_str());
  }
  std::string decode(const std::vector<int>& tokens) const override {
    std::string out;
    for (int t : tokens) out += decode_token(t);
    return out;
  }
  std::string decode_token(int token) const override {
    RZ_CHECK(token >= 0 && token < vocab_size(), "token id %d outside [0, %d) of %s", token,
             vocab_size(), path_.c_str());
    return tokens_[token];
  }

 private:
  std::string path_;
  std::vector<std::string> tokens_;
  int eot_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> load_llmc_tokenizer(const std::string& path) {
  return std::make_unique<LlmcTokenizer>(path);
}

void write_llmc_tokenizer(const Tokenizer& tok, const std::string& path) {
  int vocab = tok.vocab_size();
  std::string body;
  for (int i = 0; i < vocab; i++) {
    std::string t = tok.decode_token(i);
    RZ_CHECK(!t.empty() && t.size() <= 255,
             "%s: token %d is %zu bytes; tokenizer.bin stores 1..255 bytes per token", path.c_str(), i,
             t.size());
    body.push_back(static_cast<char>(t.size()));
    body += t;
  }
  int32_t header[256] = {};
  header[0] = kTokenizerMagic;
  header[1] = 2;
  header[2] = vocab;
  header[3] = tok.eot();
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  bytes += body;
  write_file_atomic(path, bytes);
}

std::string default_gpt2_dir() {
  auto has_files = [](const std::string& d) {
    struct stat st;
    return stat((d + "/encoder.json").c_str(), &st) == 0 && stat((d + "/vocab.bpe").c_str(), &st) == 0;
  };
  if (const char* env = std::getenv("RINGZERO_GPT2_DIR"); env != nullptr && *env != 0) return env;
  std::vector<std::string> candidates;
#ifdef RINGZERO_GPT2_SOURCE_DIR
  candidates.emplace_back(RINGZERO_GPT2_SOURCE_DIR);  // the repository this binary was built from
#endif
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {  // a copied tree: <repo>/build/ringzero or <prefix>/bin/ringzero
    exe[n] = 0;
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* rel : {"/../data/gpt2", "/../../data/gpt2", "/../share/ringzero/gpt2"})
      candidates.push_back(dir + rel);
  }
  for (const auto& c : candidates)
    if (has_files(c)) return c;
  return "";
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& gpt2_dir) {
  if (spec == "byte") return make_byte_tokenizer();
  if (spec == "gpt2") {
    const std::string dir = gpt2_dir.empty() ? default_gpt2_dir() : gpt2_dir;
    RZ_CHECK(!dir.empty(),
             "tokenizer gpt2: encoder.json and vocab.bpe not found (the repository ships them in data/gpt2; "
             "give --gpt2-dir or RINGZERO_GPT2_DIR)");
    return make_gpt2_tokenizer(dir);
  }
  struct stat st;
  RZ_CHECK(stat(spec.c_str(), &st) == 0,
           "tokenizer '%s': expected byte, gpt2 or the path of an llm.c tokenizer.bin (no such file)",
           spec.c_str());
  check_input_file(spec, "tokenizer");  // a FIFO or a directory: refused before it is opened
  std::unique_ptr<Tokenizer> tok = load_llmc_tokenizer(spec);
  // A tokenizer.bin that `prepare --tokenizer byte` wrote is the byte tokenizer itself:
  // return that, so it can encode (a prompt) as well as decode.
  auto byte = make_byte_tokenizer();
  bool is_byte = tok->vocab_size() == byte->vocab_size() && tok->eot() == byte->eot();
  for (int i = 0; is_byte && i < byte->vocab_size(); ++i) is_byte = tok->decode_token(i) == byte->decode_token(i);
  return is_byte ? std::move(byte) : std::move(tok);
}

std::vector<int> token_byte_lengths(const Tokenizer& tok, int vocab_size) {
  std::vector<int> out(static_cast<size_t>(std::max(vocab_size, 0)), 0);
  const int n = std::min(vocab_size, tok.vocab_size());
  for (int t = 0; t < n; ++t)
    if (t != tok.eot()) out[static_cast<size_t>(t)] = static_cast<int>(tok.decode_token(t).size());
  return out;
}

}  // namespace rz
