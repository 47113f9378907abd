// data/tokenizer.h: one interface for the byte, GPT-2 BPE and llm.c tokenizer.bin tokenizers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rz {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "byte", "gpt2", "llmc"
  virtual std::vector<int> encode(std::string_view text) const = 0;
  // Throws rz::Error for a token id outside [0, vocab_size).
  virtual std::string decode(const std::vector<int>& tokens) const = 0;
  virtual std::string decode_token(int token) const = 0;
  virtual int vocab_size() const = 0;
  virtual int eot() const = 0;

  // Streaming encode (added for `prepare`): text is a prefix of a longer document. Appends
  // the tokens of the longest prefix of text whose encoding cannot change with the bytes that
  // follow and returns its length in bytes; with final = true text is the document's rest and
  // all of it is encoded. The default suits tokenizers without context (byte).
  virtual size_t encode_stream(std::string_view text, bool final, std::vector<int>* out) const {
    std::vector<int> t = encode(text);
    out->insert(out->end(), t.begin(), t.end());
    return text.size();
  }
};

// Each token id's length in bytes, as decode_token spells it, for ids [0, vocab_size) (a model's
// vocabulary may be larger than the tokenizer's: those ids count 0). The end-of-text token
// counts 0, as nanochat counts special tokens: bits per byte leaves such positions out.
std::vector<int> token_byte_lengths(const Tokenizer& tok, int vocab_size);

// byte: the 256 byte values plus an end-of-text token 256 (vocab 257).
std::unique_ptr<Tokenizer> make_byte_tokenizer();
// gpt2: dir holds encoder.json and vocab.bpe.
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& dir);
// llm.c tokenizer.bin (magic 20240328, version 2); decode only (encode throws).
std::unique_ptr<Tokenizer> load_llmc_tokenizer(const std::string& path);
void write_llmc_tokenizer(const Tokenizer& tok, const std::string& path);

// Where GPT-2's encoder.json and vocab.bpe are found without --gpt2-dir: RINGZERO_GPT2_DIR,
// else the repository's data/gpt2 (which ships them), else data/gpt2 beside the binary's
// tree. Empty when none has them.
std::string default_gpt2_dir();
// By name: "byte", "gpt2" (gpt2_dir empty: default_gpt2_dir()), or a path to a tokenizer.bin.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& gpt2_dir);

}  // namespace rz
