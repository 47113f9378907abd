// train/config_shape.cpp: config_model_shape (train/config.h), the model shape a training
// config describes, for bench-step and bench-strategies. Apart from config.cpp because it
// may read the data's tokenizer.bin: config.cpp parses and checks only (the TOML fuzzer
// links it alone, without data/).
#include <filesystem>
#include <string>

#include "base/check.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/config.h"

namespace rz {

GPT2Config config_model_shape(const TrainConfig& tc) {
  GPT2Config m = override_shape(model_preset(tc.model), {.layers = tc.layers, .channels = tc.channels,
                                                         .heads = tc.heads, .vocab = tc.vocab, .max_seq = tc.max_seq});
  if (tc.vocab <= 0 && tc.tokenizer == "byte") {
    m.vocab_size = 257;
  } else if (tc.vocab <= 0 && !tc.data.empty()) {
    const std::string first = tc.data.substr(0, tc.data.find(','));
    std::filesystem::path dir = std::filesystem::path(first).parent_path();
    const std::string tok = ((dir.empty() ? std::filesystem::path(".") : dir) / "tokenizer.bin").string();
    RZ_CHECK(std::filesystem::exists(tok),
             "--config: vocab = 0 takes the data's tokenizer, but %s does not exist (prepare the data or pass --vocab)",
             tok.c_str());
    m.vocab_size = load_llmc_tokenizer(tok)->vocab_size();
  }
  return m;
}

}  // namespace rz
