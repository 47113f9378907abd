// model/config.cpp: presets and shape validation.
//
// Presets follow llm.c's depth naming: dN has N layers. d12..d48 are GPT-2's four sizes
// (124M, 350M, 774M, 1558M). For the small ones llm.c leaves C open; ringzero fixes
// C = 64 * N and NH = N (head size 64, like every GPT-2 size), so d2 = (L2, C128, NH2),
// d4 = (L4, C256, NH4), d6 = (L6, C384, NH6). `tiny` is for tests: L2, C64, NH4,
// maxT 64 and V 257, the byte tokenizer's vocab.
#include "model/config.h"

#include "base/check.h"
#include "model/layout.h"

namespace rz {

namespace {
struct Preset {
  const char* name;
  int L, C, NH;
};
constexpr Preset kPresets[] = {{"d2", 2, 128, 2},    {"d4", 4, 256, 4},     {"d6", 6, 384, 6},
                               {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20},
                               {"d48", 48, 1600, 25}};
// Limits that keep a hostile header from asking for a giant allocation; far above any
// model this trainer is meant for.
constexpr long long kMaxLayers = 1024, kMaxChannels = 1 << 16, kMaxVocab = 1 << 24,
                    kMaxSeqLen = 1 << 20;
constexpr double kMaxParams = 64e9;
}  // namespace

GPT2Config model_preset(const std::string& name) {
  GPT2Config cfg;
  if (name == "tiny") {
    cfg.num_layers = 2;
    cfg.channels = 64;
    cfg.num_heads = 4;
    cfg.max_seq_len = 64;
    cfg.vocab_size = 257;
    finalize_config(cfg);
    return cfg;
  }
  for (const auto& p : kPresets) {
    if (name == p.name) {
      cfg.num_layers = p.L;
      cfg.channels = p.C;
      cfg.num_heads = p.NH;
      finalize_config(cfg);
      return cfg;
    }
  }
  std::string all;
  for (const auto& n : model_preset_names()) all += (all.empty() ? "" : ", ") + n;
  RZ_FAIL("unknown model preset '%s' (expected one of: %s)", name.c_str(), all.c_str());
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names{"tiny"};
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

GPT2Config override_shape(GPT2Config base, const ShapeOverrides& o) {
  if (o.layers > 0) base.num_layers = o.layers;
  if (o.channels > 0) base.channels = o.channels;
  if (o.heads > 0) base.num_heads = o.heads;
  if (o.vocab > 0) base.vocab_size = o.vocab;
  if (o.max_seq > 0) base.max_seq_len = o.max_seq;
  return base;
}

void finalize_config(GPT2Config& cfg) {
  auto in_range = [](const char* field, long long v, long long hi) {
    RZ_CHECK(v >= 1 && v <= hi, "model config: %s must be in [1, %lld], found %lld", field, hi, v);
  };
  in_range("num_layers (L)", cfg.num_layers, kMaxLayers);
  in_range("channels (C)", cfg.channels, kMaxChannels);
  in_range("num_heads (NH)", cfg.num_heads, cfg.channels);
  in_range("vocab_size (V)", cfg.vocab_size, kMaxVocab);
  in_range("max_seq_len (maxT)", cfg.max_seq_len, kMaxSeqLen);
  RZ_CHECK(cfg.channels % cfg.num_heads == 0,
           "model config: channels (C=%d) must be a multiple of num_heads (NH=%d)", cfg.channels,
           cfg.num_heads);
  cfg.padded_vocab_size = (cfg.vocab_size + 63) / 64 * 64;
  double C = cfg.channels;
  double n = double(cfg.padded_vocab_size) * C + double(cfg.max_seq_len) * C + 2 * C +
             double(cfg.num_layers) * (12 * C * C + 13 * C);
  RZ_CHECK(n <= kMaxParams, "model config: %.3g parameters is more than the %.3g this trainer accepts",
           n, kMaxParams);
}

const char* precision_name(Precision p) { return p == Precision::fp32 ? "fp32" : "bf16"; }

std::vector<std::string> precision_names() { return enum_names(kPrecisions, precision_name); }

Precision parse_precision(const std::string& name) {
  return parse_enum(name, kPrecisions, precision_name, "precision");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::gelu: return "gelu";
    case Recompute::layer: return "layer";
  }
  return "?";
}

std::vector<std::string> recompute_names() { return enum_names(kRecomputes, recompute_name); }

Recompute parse_recompute(const std::string& name) {
  return parse_enum(name, kRecomputes, recompute_name, "recompute");
}

const char* attention_name(Attention a) { return a == Attention::flash ? "flash" : "materialized"; }

std::vector<std::string> attention_names() { return enum_names(kAttentions, attention_name); }

Attention parse_attention(const std::string& name) {
  return parse_enum(name, kAttentions, attention_name, "attention");
}

}  // namespace rz
