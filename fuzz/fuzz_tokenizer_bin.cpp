// Fuzz target: llm.c tokenizer.bin (data/tokenizer.cpp), read for decoding beside shards.
#include "data/tokenizer.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = rz::fuzz::write_input(data, size, "tokenizer.bin");
  try {
    auto tok = rz::load_llmc_tokenizer(path);
    size_t bytes = 0;
    for (int i = 0; i < tok->vocab_size(); ++i) bytes += tok->decode_token(i).size();
    (void)tok->decode_token(tok->eot());
    if (bytes > size) std::abort();  // every token's bytes come from the file
  } catch (const rz::Error&) {
  }
  return 0;
}
