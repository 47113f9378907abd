// Fuzz target: a Hugging Face GPT-2 directory's JSON (model/hf_gpt2.cpp): config.json and
// model.safetensors.index.json, both parsed from the same bytes.
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/hf_gpt2.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const rz::GPT2Config cfg = rz::parse_hf_gpt2_config(text, "config.json");
    if (cfg.padded_vocab_size % 64 != 0 || cfg.padded_vocab_size < cfg.vocab_size) std::abort();
  } catch (const rz::Error&) {
  }
  try {
    for (const auto& [name, shard] : rz::parse_hf_weight_map(text, "model.safetensors.index.json"))
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") std::abort();
  } catch (const rz::Error&) {
  }
  return 0;
}
