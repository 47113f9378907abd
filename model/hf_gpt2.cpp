// model/hf_gpt2.cpp: Hugging Face GPT-2 directories in and out (see hf_gpt2.h).
#include "model/hf_gpt2.h"

#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/bf16.h"
#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"
#include "model/hf_dir.h"
#include "model/json_input.h"
#include "model/safetensors.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

using json = nlohmann::json;

constexpr const char* kPrefix = "transformer.";

// The tanh-approximated GELU under both the names transformers gives it.
bool is_tanh_gelu(const std::string& a) { return a == "gelu_new" || a == "gelu_pytorch_tanh"; }

std::string shown(const std::string& s) { return hf_shown(s); }

// What a name in a weight file is, once "transformer." is taken off.
struct Classified {
  enum Kind { param, buffer, lm_head, unknown } kind = unknown;
  size_t tensor = 0;  // param: index into the layout
};

// The layout tensor a GPT-2 name stands for (names without the prefix).
class NameTable {
 public:
  NameTable(const GPT2Config& cfg, const ParamLayout& lay) {
    for (size_t i = 0; i < lay.tensors.size(); ++i) by_name_[hf_gpt2_tensor_name(cfg, lay.tensors[i]).name] = i;
    for (int l = 0; l < cfg.num_layers; ++l) {
      buffers_.insert(strfmt("h.%d.attn.bias", l));
      buffers_.insert(strfmt("h.%d.attn.masked_bias", l));
    }
  }
  Classified classify(const std::string& name) const {
    if (auto it = by_name_.find(name); it != by_name_.end()) return {Classified::param, it->second};
    if (buffers_.count(name)) return {Classified::buffer, 0};
    if (name == "lm_head.weight") return {Classified::lm_head, 0};
    return {};
  }

 private:
  std::map<std::string, size_t> by_name_;
  std::set<std::string> buffers_;
};

using OpenWeights = HfWeights;

// Reads a whole tensor as fp32 in ringzero's orientation (a Conv1D weight transposed).
void read_oriented(const OpenWeights::Where& src, const HfTensorName& hn, std::vector<float>& out,
                   std::vector<float>& scratch) {
  const size_t n = static_cast<size_t>(src.info->numel);
  if (!hn.conv1d) {
    resize_or_fail(out, n, "a tensor of the Hugging Face model");
    src.file->read_f32(*src.info, 0, n, out.data());
    return;
  }
  resize_or_fail(scratch, n, "a tensor of the Hugging Face model");
  resize_or_fail(out, n, "a tensor of the Hugging Face model");
  src.file->read_f32(*src.info, 0, n, scratch.data());
  const size_t in = hn.shape[0], outd = hn.shape[1];  // Conv1D (in, out) -> Linear (out, in)
  for (size_t i = 0; i < in; ++i)
    for (size_t o = 0; o < outd; ++o) out[o * in + i] = scratch[i * outd + o];
}

}  // namespace

HfTensorName hf_gpt2_tensor_name(const GPT2Config& cfg, const ParamTensor& t) {
  const uint64_t C = static_cast<uint64_t>(cfg.channels);
  const std::string h = strfmt("h.%d.", t.layer);
  switch (t.kind) {
    case ParamKind::wte: return {"wte.weight", {static_cast<uint64_t>(cfg.vocab_size), C}, false};
    case ParamKind::wpe: return {"wpe.weight", {static_cast<uint64_t>(cfg.max_seq_len), C}, false};
    case ParamKind::ln1w: return {h + "ln_1.weight", {C}, false};
    case ParamKind::ln1b: return {h + "ln_1.bias", {C}, false};
    case ParamKind::qkvw: return {h + "attn.c_attn.weight", {C, 3 * C}, true};
    case ParamKind::qkvb: return {h + "attn.c_attn.bias", {3 * C}, false};
    case ParamKind::attprojw: return {h + "attn.c_proj.weight", {C, C}, true};
    case ParamKind::attprojb: return {h + "attn.c_proj.bias", {C}, false};
    case ParamKind::ln2w: return {h + "ln_2.weight", {C}, false};
    case ParamKind::ln2b: return {h + "ln_2.bias", {C}, false};
    case ParamKind::fcw: return {h + "mlp.c_fc.weight", {C, 4 * C}, true};
    case ParamKind::fcb: return {h + "mlp.c_fc.bias", {4 * C}, false};
    case ParamKind::fcprojw: return {h + "mlp.c_proj.weight", {4 * C, C}, true};
    case ParamKind::fcprojb: return {h + "mlp.c_proj.bias", {C}, false};
    case ParamKind::lnfw: return {"ln_f.weight", {C}, false};
    case ParamKind::lnfb: return {"ln_f.bias", {C}, false};
    case ParamKind::lmhead: break;  // GPT-2's classifier is wte
  }
  RZ_FAIL("hf_gpt2_tensor_name: unknown parameter kind %d", static_cast<int>(t.kind));
}

GPT2Config parse_hf_gpt2_config(std::string_view text, const std::string& path) {
  const json c = parse_hf_config_json(text, path);
  const char* p = path.c_str();
  const std::string model_type = hf_model_type(c, path);
  RZ_CHECK(model_type == "gpt2", "config.json %s: model_type '%s' is not GPT-2 (this reader reads model_type gpt2)", p,
           shown(model_type).c_str());
  if (c.contains("architectures") && !c["architectures"].is_null()) {
    const json& a = c["architectures"];
    RZ_CHECK(a.is_array(), "config.json %s: architectures is not a list", p);
    for (const json& name : a) {
      RZ_CHECK(name.is_string(), "config.json %s: architectures holds %s, expected names", p,
               shown(name.dump().substr(0, 40)).c_str());
      const std::string n = name.get<std::string>();
      RZ_CHECK(n == "GPT2LMHeadModel" || n == "GPT2Model",
               "config.json %s: architecture '%s' is not one ringzero reads (GPT2LMHeadModel, or GPT2Model)", p,
               shown(n).c_str());
    }
  }
  // transformers' GPT2Config defaults stand in for absent keys, as from_pretrained does.
  GPT2Config cfg;
  cfg.num_layers = hf_int_field(c, "n_layer", 12, path);
  cfg.num_heads = hf_int_field(c, "n_head", 12, path);
  cfg.channels = hf_int_field(c, "n_embd", 768, path);
  cfg.vocab_size = hf_int_field(c, "vocab_size", 50257, path);
  cfg.max_seq_len = hf_int_field(c, "n_positions", hf_int_field(c, "n_ctx", 1024, path), path);
  const double eps = hf_typed_field<double>(c, "layer_norm_epsilon", "a number", path).value_or(1e-5);
  RZ_CHECK(eps == 1e-5, "config.json %s: layer_norm_epsilon %g, but ringzero's layernorm uses 1e-5", p, eps);
  const std::string act = hf_typed_field<std::string>(c, "activation_function", "a string", path).value_or("gelu_new");
  RZ_CHECK(is_tanh_gelu(act),
           "config.json %s: activation_function '%s', but ringzero computes gelu_new (GELU, tanh approximation)", p,
           shown(act).c_str());
  RZ_CHECK(hf_typed_field<bool>(c, "tie_word_embeddings", "true or false", path).value_or(true),
           "config.json %s: tie_word_embeddings is false, but ringzero's classifier is always the token embedding wte",
           p);
  if (c.contains("n_inner") && !c["n_inner"].is_null()) {
    const int inner = hf_int_field(c, "n_inner", 0, path);
    RZ_CHECK(static_cast<long long>(inner) == 4LL * cfg.channels,
             "config.json %s: n_inner %d, but ringzero's MLP is 4 x n_embd = %lld wide", p, inner, 4LL * cfg.channels);
  }
  RZ_CHECK(hf_typed_field<bool>(c, "scale_attn_weights", "true or false", path).value_or(true),
           "config.json %s: scale_attn_weights is false, but ringzero scales attention by 1/sqrt(head size)", p);
  RZ_CHECK(!hf_typed_field<bool>(c, "scale_attn_by_inverse_layer_idx", "true or false", path).value_or(false),
           "config.json %s: scale_attn_by_inverse_layer_idx is true, which ringzero's attention does not do", p);
  RZ_CHECK(!hf_typed_field<bool>(c, "add_cross_attention", "true or false", path).value_or(false),
           "config.json %s: add_cross_attention is true (an encoder-decoder GPT-2), which ringzero does not have", p);
  try {
    finalize_config(cfg);
  } catch (const Error& e) {
    RZ_FAIL("config.json %s: %s", p, e.what());
  }
  return cfg;
}

HfGpt2Dir inspect_hf_gpt2(const std::string& dir) {
  HfDirFiles f = list_hf_dir(dir);
  HfGpt2Dir d;
  d.cfg = parse_hf_gpt2_config(f.config.dump(), f.config_path);
  d.files = std::move(f.files);
  d.weight_files = std::move(f.weight_files);
  return d;
}

HfGpt2Dir read_hf_gpt2(const std::string& dir, const ParamChunkSink& sink) {
  HfGpt2Dir d = inspect_hf_gpt2(dir);
  const GPT2Config& cfg = d.cfg;
  const ParamLayout lay = build_param_layout(cfg);
  const NameTable table(cfg, lay);
  HfDirFiles files;
  files.files = d.files;
  files.weight_files = d.weight_files;
  const OpenWeights w = open_hf_weights(files, dir, kPrefix);
  const std::string shape = strfmt("n_layer %d, n_head %d, n_embd %d, n_positions %d, vocab_size %d", cfg.num_layers,
                                   cfg.num_heads, cfg.channels, cfg.max_seq_len, cfg.vocab_size);
  // Every tensor in the files is known, and in a dtype ringzero reads, before anything is read.
  std::vector<const OpenWeights::Where*> source(lay.tensors.size(), nullptr);
  const OpenWeights::Where* lm_head = nullptr;
  for (const auto& [name, where] : w.by_name) {
    const Classified k = table.classify(name);
    const std::string& file = where.file->path();
    switch (k.kind) {
      case Classified::unknown:
        RZ_FAIL("%s: tensor '%s' is not a GPT-2 parameter ringzero knows (config.json: %s)", file.c_str(),
                shown(where.info->name).c_str(), shape.c_str());
      case Classified::buffer:
        continue;  // the causal mask and masked_bias: buffers, not parameters
      case Classified::lm_head:
        lm_head = &where;
        break;
      case Classified::param:
        source[k.tensor] = &where;
        break;
    }
    const SafeTensorInfo& t = *where.info;
    RZ_CHECK(safe_dtype_is_float(t.dtype), "%s: tensor '%s' is %s; ringzero reads F32, F16 or BF16 weights",
             file.c_str(), shown(t.name).c_str(), safe_dtype_name(t.dtype));
    const HfTensorName expected = k.kind == Classified::lm_head
                                      ? HfTensorName{"lm_head.weight", hf_gpt2_tensor_name(cfg, lay.find(ParamKind::wte)).shape}
                                      : hf_gpt2_tensor_name(cfg, lay.tensors[k.tensor]);
    RZ_CHECK(t.shape == expected.shape, "%s: tensor '%s' has shape %s, but config.json (%s) gives %s", file.c_str(),
             shown(t.name).c_str(), shape_text(t.shape).c_str(), shape.c_str(), shape_text(expected.shape).c_str());
  }
  for (size_t i = 0; i < lay.tensors.size(); ++i)
    RZ_CHECK(source[i] != nullptr, "hf:%s: tensor '%s' is missing (looked for it with and without the '%s' prefix)",
             dir.c_str(), hf_gpt2_tensor_name(cfg, lay.tensors[i]).name.c_str(), kPrefix);

  std::vector<float> data, scratch;
  for (size_t i = 0; i < lay.tensors.size(); ++i) {
    const ParamTensor& t = lay.tensors[i];
    const HfTensorName hn = hf_gpt2_tensor_name(cfg, t);
    read_oriented(*source[i], hn, data, scratch);
    sink(t.offset, data.data(), data.size());
    if (t.kind == ParamKind::wte) {
      if (lm_head != nullptr) {  // must be wte itself: the classifier is tied
        resize_or_fail(scratch, data.size(), "lm_head.weight");
        lm_head->file->read_f32(*lm_head->info, 0, data.size(), scratch.data());
        for (size_t j = 0; j < data.size(); ++j)
          RZ_CHECK(std::memcmp(&scratch[j], &data[j], sizeof(float)) == 0,
                   "%s: lm_head.weight differs from wte.weight (row %zu, column %zu: %g vs %g), but ringzero's "
                   "classifier is tied to the token embedding", lm_head->file->path().c_str(),
                   j / static_cast<size_t>(cfg.channels), j % static_cast<size_t>(cfg.channels), scratch[j], data[j]);
      }
      // The padding rows V..Vp-1 of ringzero's wte: zero.
      const std::vector<float> zeros(t.numel - data.size(), 0.0f);
      sink(t.offset + data.size(), zeros.data(), zeros.size());
    }
  }
  return d;
}

void write_hf_gpt2(const std::string& dir, const GPT2Config& cfg_in, Precision dtype, const float* params_internal,
                   bool overwrite) {
  GPT2Config cfg = cfg_in;
  finalize_config(cfg);
  const ParamLayout lay = build_param_layout(cfg);
  RZ_CHECK(cfg.family == ModelFamily::gpt2, "write_hf_gpt2: a %s model is not GPT-2 (write_hf_model picks its family's writer)",
           family_name(cfg.family));
  prepare_hf_out_dir(dir, overwrite);
  // Tensors in llm.c's order of kinds (wte, wpe, each layer, ln_f), with the prefix
  // save_pretrained writes.
  std::vector<const ParamTensor*> order;
  for (const ParamTensor& t : lay.tensors)
    if (t.layer < 0 && (t.kind == ParamKind::wte || t.kind == ParamKind::wpe)) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const ParamTensor* a, const ParamTensor* b) { return a->kind < b->kind; });
  for (int l = 0; l < cfg.num_layers; ++l)
    for (int k = 0; k < kNumParamKinds; ++k)
      for (const ParamTensor& t : lay.tensors)
        if (t.layer == l && static_cast<int>(t.kind) == k) order.push_back(&t);
  order.push_back(&lay.find(ParamKind::lnfw));
  order.push_back(&lay.find(ParamKind::lnfb));
  const SafeDType sd = dtype == Precision::fp32 ? SafeDType::F32 : SafeDType::BF16;
  std::vector<SafeTensorSpec> specs;
  for (const ParamTensor* t : order) {
    const HfTensorName hn = hf_gpt2_tensor_name(cfg, *t);
    specs.push_back({kPrefix + hn.name, sd, hn.shape});
  }
  write_safetensors((fs::path(dir) / kHfWeightsName).string(), specs, {{"format", "pt"}},
                    [&](size_t i, const SafeBytesSink& put) {
                      const ParamTensor& t = *order[i];
                      const HfTensorName hn = hf_gpt2_tensor_name(cfg, t);
                      const float* src = params_internal + t.offset;
                      size_t n = t.numel;
                      std::vector<float> oriented;
                      if (hn.conv1d) {  // Linear (out, in) -> Conv1D (in, out)
                        const size_t in = hn.shape[0], outd = hn.shape[1];
                        oriented.resize(n);
                        for (size_t o = 0; o < outd; ++o)
                          for (size_t j = 0; j < in; ++j) oriented[j * outd + o] = src[o * in + j];
                        src = oriented.data();
                      }
                      if (t.kind == ParamKind::wte) n = static_cast<size_t>(cfg.vocab_size) * cfg.channels;  // no padding rows
                      if (dtype == Precision::fp32) {
                        put(src, n * sizeof(float));
                        return;
                      }
                      constexpr size_t kChunk = size_t{1} << 15;
                      std::vector<bf16> raw(std::min(n, kChunk));
                      for (size_t at = 0; at < n; at += kChunk) {
                        const size_t k = std::min(kChunk, n - at);
                        for (size_t q = 0; q < k; ++q) raw[q] = float_to_bf16(src[at + q]);
                        put(raw.data(), k * sizeof(bf16));
                      }
                    });
  // config.json last: a directory with it is whole. bos/eos: the last token, the end of text of
  // GPT-2's vocabulary (50256) and of the byte tokenizer (256).
  nlohmann::ordered_json c;
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  c["n_layer"] = cfg.num_layers;
  c["n_head"] = cfg.num_heads;
  c["n_embd"] = cfg.channels;
  c["n_positions"] = cfg.max_seq_len;
  c["n_ctx"] = cfg.max_seq_len;
  c["vocab_size"] = cfg.vocab_size;
  c["n_inner"] = nullptr;
  c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = 1e-5;
  c["tie_word_embeddings"] = true;
  c["scale_attn_weights"] = true;
  c["bos_token_id"] = cfg.vocab_size - 1;
  c["eos_token_id"] = cfg.vocab_size - 1;
  c["torch_dtype"] = dtype == Precision::fp32 ? "float32" : "bfloat16";
  write_file_atomic((fs::path(dir) / kHfConfigName).string(), c.dump(2) + "\n");
}

}  // namespace rz
