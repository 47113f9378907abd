// Fuzz target: the llama family's file (model/hf_llama.h), the Hugging Face directory it
// reads and writes, and the safetensors reference `verify` reads (model/reference_state.h).
//
// An input is a directory in one blob: 4 bytes (little-endian) give the length L of
// config.json's text, which follows; the rest is model.safetensors. config.json is parsed
// alone (every input); when it parses into a small shape, both files go into a scratch
// directory and are read as a model (every tensor checked against config.json, streamed to a
// sink that checks its ranges) and the weights file as a verify reference. The seeds
// (fuzz/corpus/hf_llama/) hold tests/fixtures/hf_llama_tiny's configs beside a tiny model
// whose weights match them, and configs of the forms transformers writes (rope_parameters,
// rope_theta with rope_scaling null).
#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/hf_dir.h"
#include "model/hf_llama.h"
#include "model/layout.h"
#include "model/reference_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint32_t n = 0;
  if (size >= 4) std::memcpy(&n, data, 4);
  const size_t config_len = size >= 4 ? std::min<size_t>(n, size - 4) : size;
  const uint8_t* config = size >= 4 ? data + 4 : data;
  const std::string text(reinterpret_cast<const char*>(config), config_len);
  rz::ModelConfig cfg;
  try {
    cfg = rz::parse_hf_llama_config(text, "config.json");
  } catch (const rz::Error&) {
    return 0;
  }
  if (cfg.family != rz::ModelFamily::llama || cfg.padded_vocab_size % 64 != 0 || cfg.num_heads % cfg.num_kv_heads != 0 ||
      cfg.head_size() % 2 != 0)
    std::abort();
  if (size < 4 || rz::num_parameters(cfg) > (size_t{1} << 20)) return 0;
  rz::fuzz::write_input(config, config_len, "config.json");
  const std::string weights = rz::fuzz::write_input(config + config_len, size - 4 - config_len, "model.safetensors");
  const std::string dir = rz::fuzz::scratch_dir();
  const size_t total = rz::num_parameters(cfg);
  try {
    rz::read_hf_llama(dir, rz::list_hf_dir(dir), [&](size_t begin, const float*, size_t k) {
      if (begin > total || k > total - begin) std::abort();
    });
  } catch (const rz::Error&) {
  }
  try {
    const rz::DebugState s = rz::read_reference_state(weights, cfg);
    if (s.grads.size() != total || s.x.size() != size_t(s.B) * s.T) std::abort();
  } catch (const rz::Error&) {
  }
  return 0;
}
