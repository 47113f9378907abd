// Fuzz target: GPT-2 BPE on arbitrary bytes (data/bpe.cpp, data/pretokenize.cpp), with the
// encoder.json and vocab.bpe the repository ships. Encoding never fails; decoding gives the
// input back; the streaming encoder agrees with the whole-text one.
#include <vector>

#include "data/tokenizer.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = rz::make_gpt2_tokenizer(RINGZERO_SOURCE_DIR "/data/gpt2");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int> ids = tok->encode(text);
  for (int id : ids)
    if (id < 0 || id >= tok->vocab_size()) std::abort();
  if (tok->decode(ids) != text) std::abort();
  // Streaming: feed in two pieces, carrying what the first could not settle.
  const size_t cut = size / 2;
  std::vector<int> streamed;
  const size_t used = tok->encode_stream(text.substr(0, cut), false, &streamed);
  if (used > cut) std::abort();
  tok->encode_stream(text.substr(used), true, &streamed);
  if (streamed != ids) std::abort();
  return 0;
}
