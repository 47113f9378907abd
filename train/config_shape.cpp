// train/config_shape.cpp: config_model_shape (train/config.h), the model shape a training
// config describes, for bench-step and bench-strategies. Apart from config.cpp because it
// may read the data's tokenizer.bin: config.cpp parses and checks only (the TOML fuzzer
// links it alone, without data/).
#include <filesystem>
#include <string>
#include <tuple>

#include "base/check.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/config.h"

namespace rz {

ShapeOverrides config_shape_overrides(const TrainConfig& tc) {
  return {.layers = tc.layers,
          .channels = tc.channels,
          .heads = tc.heads,
          .vocab = tc.vocab,
          .max_seq = tc.max_seq,
          .family = tc.family,
          .kv_heads = tc.kv_heads,
          .intermediate = tc.intermediate,
          .rope_theta = tc.rope_theta,
          .norm_eps = tc.norm_eps,
          .classifier = tc.classifier};
}

void check_shape_keys_match(const TrainConfig& tc, const ModelConfig& m, const std::string& source) {
  RZ_CHECK(tc.family == "auto" || tc.family == family_name(m.family), "family: %s, but %s is of the %s family",
           tc.family.c_str(), source.c_str(), family_name(m.family));
  for (auto [key, want, have] : {std::tuple{"layers", tc.layers, m.num_layers},
                                 {"channels", tc.channels, m.channels},
                                 {"heads", tc.heads, m.num_heads},
                                 {"kv_heads", tc.kv_heads, m.num_kv_heads},
                                 {"intermediate", tc.intermediate, m.intermediate},
                                 {"vocab", tc.vocab, m.vocab_size},
                                 {"max_seq", tc.max_seq, m.max_seq_len}})
    RZ_CHECK(want == 0 || want == have, "%s: %d, but %s has %d", key, want, source.c_str(), have);
  for (auto [key, want, have] : {std::tuple{"rope_theta", tc.rope_theta, m.rope_theta},
                                 {"norm_eps", tc.norm_eps, m.norm_eps}})
    RZ_CHECK(want == 0 || want == have, "%s: %g, but %s has %g", key, want, source.c_str(), have);
  RZ_CHECK(tc.classifier == "auto" || (tc.classifier == "tied") == m.tied, "classifier: %s, but %s has a%s classifier",
           tc.classifier.c_str(), source.c_str(), m.tied ? " tied" : "n untied");
}

GPT2Config config_model_shape(const TrainConfig& tc) {
  GPT2Config m = override_shape(model_preset(tc.model), config_shape_overrides(tc));
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
