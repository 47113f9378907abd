// model/config.cpp: presets and shape validation.
//
// GPT-2 presets follow llm.c's depth naming: dN has N layers. d12..d48 are GPT-2's four sizes
// (124M, 350M, 774M, 1558M). For the small ones llm.c leaves C open; ringzero fixes
// C = 64 * N and NH = N (head size 64, like every GPT-2 size), so d2 = (L2, C128, NH2),
// d4 = (L4, C256, NH4), d6 = (L6, C384, NH6). `tiny` is for tests: L2, C64, NH4,
// maxT 64 and V 257, the byte tokenizer's vocab.
// Llama presets: llama-dN is dN's L, C and NH with half as many kv heads (GQA, group 2) and
// the MLP width of default_intermediate (GPT-2's MLP parameter count); llama-tiny is tiny's
// shape with 2 kv heads; smollm2-135m is HuggingFaceTB/SmolLM2-135M's config.json (30 layers,
// 576 channels, 9 heads, 3 kv heads, 1536 intermediate, 49152 vocab, 8192 positions, theta
// 100000, rms_norm_eps 1e-5, tied).
#include "model/config.h"

#include "base/check.h"
#include "model/layout.h"

namespace rz {

namespace {
struct Preset {
  const char* name;
  ModelFamily family;
  int L, C, NH, NKV, H;  // NKV, H 0: the family's default
  int maxT, V;           // 0: GPT-2's (1024, 50257)
  double theta;          // 0: 10000 (rope families)
};
constexpr Preset kPresets[] = {
    {"tiny", ModelFamily::gpt2, 2, 64, 4, 0, 0, 64, 257, 0},
    {"d2", ModelFamily::gpt2, 2, 128, 2, 0, 0, 0, 0, 0},
    {"d4", ModelFamily::gpt2, 4, 256, 4, 0, 0, 0, 0, 0},
    {"d6", ModelFamily::gpt2, 6, 384, 6, 0, 0, 0, 0, 0},
    {"d12", ModelFamily::gpt2, 12, 768, 12, 0, 0, 0, 0, 0},
    {"d24", ModelFamily::gpt2, 24, 1024, 16, 0, 0, 0, 0, 0},
    {"d36", ModelFamily::gpt2, 36, 1280, 20, 0, 0, 0, 0, 0},
    {"d48", ModelFamily::gpt2, 48, 1600, 25, 0, 0, 0, 0, 0},
    {"llama-tiny", ModelFamily::llama, 2, 64, 4, 2, 0, 64, 257, 0},
    {"llama-d4", ModelFamily::llama, 4, 256, 4, 2, 0, 0, 0, 0},
    {"llama-d6", ModelFamily::llama, 6, 384, 6, 3, 0, 0, 0, 0},
    {"llama-d12", ModelFamily::llama, 12, 768, 12, 6, 0, 0, 0, 0},
    {"smollm2-135m", ModelFamily::llama, 30, 576, 9, 3, 1536, 8192, 49152, 100000},
};
// Limits that keep a hostile header from asking for a giant allocation; far above any
// model this trainer is meant for.
constexpr long long kMaxLayers = 1024, kMaxChannels = 1 << 16, kMaxVocab = 1 << 24,
                    kMaxSeqLen = 1 << 20, kMaxIntermediate = 1 << 20;
constexpr double kMaxParams = 64e9;
constexpr double kDefaultTheta = 10000.0, kDefaultEps = 1e-5;
// GPT-2's layernorm epsilon: a constant of the layernorm op (kernels/cpu/layernorm.h).
constexpr double kLayerNormEps = 1e-5;
}  // namespace

ModelConfig model_preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig cfg;
    cfg.family = p.family;
    cfg.num_layers = p.L;
    cfg.channels = p.C;
    cfg.num_heads = p.NH;
    cfg.num_kv_heads = p.NKV;
    cfg.intermediate = p.H;
    if (p.maxT > 0) cfg.max_seq_len = p.maxT;
    if (p.V > 0) cfg.vocab_size = p.V;
    cfg.rope_theta = p.theta;
    finalize_config(cfg);
    return cfg;
  }
  RZ_FAIL("unknown model preset '%s' (expected one of: %s)", name.c_str(), or_list(model_preset_names()).c_str());
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

int default_intermediate(int channels) {
  const long long h = (8LL * channels + 2) / 3;  // ceil(8C / 3)
  return static_cast<int>((h + 63) / 64 * 64);
}

ModelConfig override_shape(ModelConfig base, const ShapeOverrides& o) {
  if (!o.family.empty() && o.family != "auto") {
    const ModelFamily f = parse_family(o.family);
    if (f != base.family) {  // the new family's defaults for what the old one's sizes do not say
      base.family = f;
      base.num_kv_heads = base.intermediate = 0;
      base.rope_theta = base.norm_eps = 0;
      base.tied = true;
    }
  }
  if (o.layers > 0) base.num_layers = o.layers;
  // A shape's MLP width goes with its channels and its kv heads with its heads: new channels
  // without a new width take the family's default width for them; new heads without new kv
  // heads keep the group size where it divides them, else one kv head per query head.
  if (o.channels > 0 && o.channels != base.channels) base.intermediate = 0;
  if (o.channels > 0) base.channels = o.channels;
  if (o.heads > 0 && o.heads != base.num_heads && base.num_kv_heads > 0) {
    const int group = base.num_heads / base.num_kv_heads;
    base.num_kv_heads = group > 0 && o.heads % group == 0 ? o.heads / group : o.heads;
  }
  if (o.heads > 0) base.num_heads = o.heads;
  if (o.vocab > 0) base.vocab_size = o.vocab;
  if (o.max_seq > 0) base.max_seq_len = o.max_seq;
  if (o.kv_heads > 0) base.num_kv_heads = o.kv_heads;
  if (o.intermediate > 0) base.intermediate = o.intermediate;
  // Keys the family does not have are refused by name rather than ignored.
  const FamilyTraits& tr = family_traits(base.family);
  const char* fam = family_name(base.family);
  RZ_CHECK(o.kv_heads <= 0 || tr.grouped_kv || o.kv_heads == base.num_heads,
           "kv_heads: %d, but the %s family has one kv head per query head (grouped-query attention is the llama "
           "family's: family = llama)", o.kv_heads, fam);
  RZ_CHECK(o.intermediate <= 0 || tr.mlp == MlpKind::swiglu || o.intermediate == 4 * base.channels,
           "intermediate: %d, but the %s family's MLP is 4 x channels = %d wide (a gated MLP of any width is the llama "
           "family's)", o.intermediate, fam, 4 * base.channels);
  RZ_CHECK(o.rope_theta <= 0 || tr.position == PositionKind::rope,
           "rope_theta: %g, but the %s family has learned positions (wpe), no rotary embeddings", o.rope_theta, fam);
  RZ_CHECK(o.norm_eps <= 0 || tr.norm == NormKind::rmsnorm || o.norm_eps == kLayerNormEps,
           "norm_eps: %g, but the %s family's layernorm uses %g", o.norm_eps, fam, kLayerNormEps);
  if (o.rope_theta > 0) base.rope_theta = o.rope_theta;
  if (o.norm_eps > 0) base.norm_eps = o.norm_eps;
  if (!o.classifier.empty() && o.classifier != "auto") {
    RZ_CHECK(o.classifier == "tied" || o.classifier == "untied", "classifier: expected auto, tied or untied, found '%s'",
             o.classifier.c_str());
    base.tied = o.classifier == "tied";
    RZ_CHECK(base.tied || tr.untied_ok, "classifier: untied, but the %s family's classifier is the token embedding wte "
             "(an untied lm_head is the llama family's)", fam);
  }
  return base;
}

void finalize_config(ModelConfig& cfg) {
  const FamilyTraits& tr = family_traits(cfg.family);
  const char* fam = family_name(cfg.family);
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
  // kv heads: GPT-2 has one per query head (whatever a reused config held: override_shape
  // refuses a user's other value by key); a grouped family any divisor of NH.
  if (cfg.num_kv_heads == 0 || !tr.grouped_kv) cfg.num_kv_heads = cfg.num_heads;
  in_range("kv_heads (NKV)", cfg.num_kv_heads, cfg.num_heads);
  RZ_CHECK(cfg.num_heads % cfg.num_kv_heads == 0,
           "model config: heads (NH=%d) must be a multiple of kv_heads (NKV=%d): each kv head serves NH/NKV query heads",
           cfg.num_heads, cfg.num_kv_heads);
  // The MLP's width: GPT-2's is 4C, always; a gated MLP's is free.
  if (tr.mlp == MlpKind::gelu) cfg.intermediate = 4 * cfg.channels;
  else if (cfg.intermediate == 0) cfg.intermediate = default_intermediate(cfg.channels);
  in_range("intermediate (H)", cfg.intermediate, kMaxIntermediate);
  // Positions: learned rows of wpe, or rotary pairs (i, i + hs/2) within each head.
  if (tr.position == PositionKind::rope) {
    if (cfg.rope_theta == 0) cfg.rope_theta = kDefaultTheta;
    RZ_CHECK(cfg.rope_theta > 1 && cfg.rope_theta < 1e12, "model config: rope_theta must be in (1, 1e12), found %g",
             cfg.rope_theta);
    RZ_CHECK(cfg.head_size() % 2 == 0,
             "model config: head size C/NH = %d/%d = %d is odd, but rotary embeddings rotate pairs (i, i + hs/2)",
             cfg.channels, cfg.num_heads, cfg.head_size());
  } else {
    cfg.rope_theta = 0;
  }
  if (tr.norm == NormKind::rmsnorm) {
    if (cfg.norm_eps == 0) cfg.norm_eps = kDefaultEps;
    RZ_CHECK(cfg.norm_eps > 0 && cfg.norm_eps < 1, "model config: norm_eps must be in (0, 1), found %g", cfg.norm_eps);
  } else {
    cfg.norm_eps = kLayerNormEps;
  }
  RZ_CHECK(cfg.tied || tr.untied_ok,
           "model config: an untied classifier, but the %s family's classifier is the token embedding wte", fam);
  cfg.padded_vocab_size = (cfg.vocab_size + 63) / 64 * 64;
  const double C = cfg.channels, H = cfg.intermediate, Q = double(cfg.qkv_width()), F = double(cfg.fc_width());
  const double per_layer = Q * C + C * C + F * C + C * H + 4 * C + Q + F + 2 * C;  // with every bias: a bound
  const double n = double(cfg.padded_vocab_size) * C * (cfg.tied ? 1 : 2) + double(cfg.max_seq_len) * C + 2 * C +
                   double(cfg.num_layers) * per_layer;
  RZ_CHECK(n <= kMaxParams, "model config: %.3g parameters is more than the %.3g this trainer accepts",
           n, kMaxParams);
}

std::string describe_shape(const ModelConfig& cfg) {
  if (cfg.family == ModelFamily::gpt2)
    return strfmt("L%d C%d NH%d V%d maxT%d", cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size,
                  cfg.max_seq_len);
  return strfmt("%s L%d C%d NH%d NKV%d H%d V%d maxT%d theta %g eps %g %s", family_name(cfg.family), cfg.num_layers,
                cfg.channels, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate, cfg.vocab_size, cfg.max_seq_len,
                cfg.rope_theta, cfg.norm_eps, cfg.tied ? "tied" : "untied");
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
