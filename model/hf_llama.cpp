// model/hf_llama.cpp: Hugging Face Llama directories in and out (see hf_llama.h).
#include "model/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/bf16.h"
#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"
#include "model/safetensors.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

using json = nlohmann::json;

// Elements per row of a layout tensor (a vector is one row).
size_t row_len(const ParamTensor& t) { return t.shape.size() > 1 ? t.shape[1] : t.numel; }
uint64_t piece_numel(const HfPiece& p) {
  uint64_t n = 1;
  for (uint64_t d : p.shape) n *= d;
  return n;
}

// The rope settings of a config: rope_theta at the top (transformers 4) or in
// rope_parameters (transformers 5); scaling of any kind is refused by name.
double rope_theta_of(const json& c, const std::string& path) {
  const char* p = path.c_str();
  double theta = hf_typed_field<double>(c, "rope_theta", "a number", path).value_or(10000.0);
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    RZ_FAIL("config.json %s: rope_scaling is %s, but ringzero's rotary embeddings are unscaled (rope_scaling null)", p,
            hf_shown(c["rope_scaling"].dump().substr(0, 80)).c_str());
  if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
    const json& r = c["rope_parameters"];
    RZ_CHECK(r.is_object(), "config.json %s: rope_parameters is not an object", p);
    const std::string type = hf_typed_field<std::string>(r, "rope_type", "a string", path).value_or("default");
    RZ_CHECK(type == "default",
             "config.json %s: rope_parameters.rope_type '%s', but ringzero's rotary embeddings are unscaled (default)",
             p, hf_shown(type).c_str());
    for (const auto& [key, value] : r.items())
      RZ_CHECK(key == "rope_type" || key == "rope_theta",
               "config.json %s: rope_parameters.%s, a scaling parameter ringzero's rotary embeddings do not have", p,
               hf_shown(key).c_str());
    theta = hf_typed_field<double>(r, "rope_theta", "a number", path).value_or(theta);
  }
  RZ_CHECK(std::isfinite(theta) && theta > 1, "config.json %s: rope_theta %g, expected a number above 1", p, theta);
  return theta;
}

}  // namespace

std::vector<HfPiece> hf_llama_pieces(const ModelConfig& cfg, const ParamTensor& t) {
  const uint64_t C = static_cast<uint64_t>(cfg.channels), V = static_cast<uint64_t>(cfg.vocab_size),
                 KV = static_cast<uint64_t>(cfg.num_kv_heads) * static_cast<uint64_t>(cfg.head_size()),
                 H = static_cast<uint64_t>(cfg.intermediate);
  const std::string m = strfmt("model.layers.%d.", t.layer);
  switch (t.kind) {
    case ParamKind::wte: return {{"model.embed_tokens.weight", {V, C}, 0}};
    case ParamKind::lmhead: return {{"lm_head.weight", {V, C}, 0}};
    case ParamKind::lnfw: return {{"model.norm.weight", {C}, 0}};
    case ParamKind::ln1w: return {{m + "input_layernorm.weight", {C}, 0}};
    case ParamKind::ln2w: return {{m + "post_attention_layernorm.weight", {C}, 0}};
    case ParamKind::qkvw:
      return {{m + "self_attn.q_proj.weight", {C, C}, 0},
              {m + "self_attn.k_proj.weight", {KV, C}, C},
              {m + "self_attn.v_proj.weight", {KV, C}, C + KV}};
    case ParamKind::attprojw: return {{m + "self_attn.o_proj.weight", {C, C}, 0}};
    case ParamKind::fcw: return {{m + "mlp.gate_proj.weight", {H, C}, 0}, {m + "mlp.up_proj.weight", {H, C}, H}};
    case ParamKind::fcprojw: return {{m + "mlp.down_proj.weight", {C, H}, 0}};
    default: break;
  }
  RZ_FAIL("hf_llama_pieces: the llama family has no tensor %s", t.name.c_str());
}

ModelConfig parse_hf_llama_config(std::string_view text, const std::string& path) {
  const json c = parse_hf_config_json(text, path);
  const char* p = path.c_str();
  const std::string model_type = hf_model_type(c, path);
  RZ_CHECK(model_type == "llama", "config.json %s: model_type '%s' is not Llama (this reader reads model_type llama)", p,
           hf_shown(model_type).c_str());
  if (c.contains("architectures") && !c["architectures"].is_null()) {
    const json& a = c["architectures"];
    RZ_CHECK(a.is_array(), "config.json %s: architectures is not a list", p);
    for (const json& name : a) {
      RZ_CHECK(name.is_string() && name.get<std::string>() == "LlamaForCausalLM",
               "config.json %s: architecture %s is not one ringzero reads (LlamaForCausalLM)", p,
               hf_shown(name.dump().substr(0, 60)).c_str());
    }
  }
  // LlamaConfig's defaults stand in for absent keys, as from_pretrained does.
  ModelConfig cfg;
  cfg.family = ModelFamily::llama;
  cfg.channels = hf_int_field(c, "hidden_size", 4096, path);
  cfg.num_layers = hf_int_field(c, "num_hidden_layers", 32, path);
  cfg.num_heads = hf_int_field(c, "num_attention_heads", 32, path);
  cfg.num_kv_heads = hf_int_field(c, "num_key_value_heads", cfg.num_heads, path);
  cfg.intermediate = hf_int_field(c, "intermediate_size", 11008, path);
  cfg.vocab_size = hf_int_field(c, "vocab_size", 32000, path);
  cfg.max_seq_len = hf_int_field(c, "max_position_embeddings", 2048, path);
  cfg.norm_eps = hf_typed_field<double>(c, "rms_norm_eps", "a number", path).value_or(1e-6);
  RZ_CHECK(std::isfinite(cfg.norm_eps) && cfg.norm_eps > 0 && cfg.norm_eps < 1,
           "config.json %s: rms_norm_eps %g, expected a number in (0, 1)", p, cfg.norm_eps);
  cfg.rope_theta = rope_theta_of(c, path);
  cfg.tied = hf_typed_field<bool>(c, "tie_word_embeddings", "true or false", path).value_or(false);
  const std::string act = hf_typed_field<std::string>(c, "hidden_act", "a string", path).value_or("silu");
  RZ_CHECK(act == "silu", "config.json %s: hidden_act '%s', but ringzero's gated MLP computes silu (SwiGLU)", p,
           hf_shown(act).c_str());
  RZ_CHECK(!hf_typed_field<bool>(c, "attention_bias", "true or false", path).value_or(false),
           "config.json %s: attention_bias is true, but the llama family's attention has no biases", p);
  RZ_CHECK(!hf_typed_field<bool>(c, "mlp_bias", "true or false", path).value_or(false),
           "config.json %s: mlp_bias is true, but the llama family's MLP has no biases", p);
  const int tp = hf_int_field(c, "pretraining_tp", 1, path);
  RZ_CHECK(tp == 1, "config.json %s: pretraining_tp %d splits the matmuls into slices; ringzero computes them whole (1)",
           p, tp);
  RZ_CHECK(cfg.num_heads >= 1 && cfg.channels % cfg.num_heads == 0,
           "config.json %s: hidden_size %d is not a multiple of num_attention_heads %d", p, cfg.channels, cfg.num_heads);
  const int head_dim = hf_int_field(c, "head_dim", cfg.channels / cfg.num_heads, path);
  RZ_CHECK(head_dim == cfg.channels / cfg.num_heads,
           "config.json %s: head_dim %d, but ringzero's heads are hidden_size / num_attention_heads = %d wide", p,
           head_dim, cfg.channels / cfg.num_heads);
  try {
    finalize_config(cfg);
  } catch (const Error& e) {
    RZ_FAIL("config.json %s: %s", p, e.what());
  }
  return cfg;
}

ModelConfig read_hf_llama(const std::string& dir, const HfDirFiles& files, const ParamChunkSink& sink) {
  const ModelConfig cfg = parse_hf_llama_config(files.config.dump(), files.config_path);
  const ParamLayout lay = build_param_layout(cfg);
  const HfWeights w = open_hf_weights(files, dir);
  const std::string shape = describe_shape(cfg);
  // name -> (layout tensor, piece): every tensor in the files is known, and in a dtype ringzero
  // reads, before anything is read.
  std::vector<std::vector<HfPiece>> pieces(lay.tensors.size());
  std::map<std::string, std::pair<size_t, size_t>> expected;
  for (size_t i = 0; i < lay.tensors.size(); ++i) {
    pieces[i] = hf_llama_pieces(cfg, lay.tensors[i]);
    for (size_t j = 0; j < pieces[i].size(); ++j) expected[pieces[i][j].name] = {i, j};
  }
  const HfWeights::Where* lm_head = nullptr;  // a tied file's copy of embed_tokens
  std::map<std::pair<size_t, size_t>, const HfWeights::Where*> source;
  for (const auto& [name, where] : w.by_name) {
    const SafeTensorInfo& t = *where.info;
    const std::string& file = where.file->path();
    const auto it = expected.find(name);
    const bool tied_head = it == expected.end() && cfg.tied && name == "lm_head.weight";
    RZ_CHECK(it != expected.end() || tied_head, "%s: tensor '%s' is not a Llama parameter ringzero knows (config.json: %s)",
             file.c_str(), hf_shown(t.name).c_str(), shape.c_str());
    RZ_CHECK(safe_dtype_is_float(t.dtype), "%s: tensor '%s' is %s; ringzero reads F32, F16 or BF16 weights",
             file.c_str(), hf_shown(t.name).c_str(), safe_dtype_name(t.dtype));
    const std::vector<uint64_t> want =
        tied_head ? hf_llama_pieces(cfg, lay.find(ParamKind::wte))[0].shape : pieces[it->second.first][it->second.second].shape;
    RZ_CHECK(t.shape == want, "%s: tensor '%s' has shape %s, but config.json (%s) gives %s", file.c_str(),
             hf_shown(t.name).c_str(), shape_text(t.shape).c_str(), shape.c_str(), shape_text(want).c_str());
    if (tied_head) lm_head = &where;
    else source[it->second] = &where;
  }
  for (const auto& [name, at] : expected)
    RZ_CHECK(source.count(at) > 0, "hf:%s: tensor '%s' is missing%s", dir.c_str(), name.c_str(),
             name == "lm_head.weight" ? " (config.json says tie_word_embeddings false: the classifier is its own tensor)"
                                      : "");

  std::vector<float> data, check;
  for (size_t i = 0; i < lay.tensors.size(); ++i) {
    const ParamTensor& t = lay.tensors[i];
    resize_or_fail(data, t.numel, "a tensor of the Hugging Face model");
    std::fill(data.begin(), data.end(), 0.0f);  // the vocabulary's padding rows stay zero
    for (size_t j = 0; j < pieces[i].size(); ++j) {
      const HfWeights::Where& src = *source.at({i, j});
      src.file->read_f32(*src.info, 0, static_cast<size_t>(src.info->numel),
                         data.data() + pieces[i][j].first_row * row_len(t));
    }
    if (t.kind == ParamKind::wte && lm_head != nullptr) {  // must be embed_tokens itself: the classifier is tied
      const size_t n = static_cast<size_t>(lm_head->info->numel);
      resize_or_fail(check, n, "lm_head.weight");
      lm_head->file->read_f32(*lm_head->info, 0, n, check.data());
      for (size_t k = 0; k < n; ++k)
        RZ_CHECK(std::memcmp(&check[k], &data[k], sizeof(float)) == 0,
                 "%s: lm_head.weight differs from model.embed_tokens.weight (row %zu, column %zu: %g vs %g), but "
                 "config.json says tie_word_embeddings true", lm_head->file->path().c_str(),
                 k / static_cast<size_t>(cfg.channels), k % static_cast<size_t>(cfg.channels), check[k], data[k]);
    }
    sink(t.offset, data.data(), t.numel);
  }
  return cfg;
}

std::string hf_llama_config_text(const ModelConfig& cfg, Precision dtype) {
  nlohmann::ordered_json c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["hidden_size"] = cfg.channels;
  c["intermediate_size"] = cfg.intermediate;
  c["num_hidden_layers"] = cfg.num_layers;
  c["num_attention_heads"] = cfg.num_heads;
  c["num_key_value_heads"] = cfg.num_kv_heads;
  c["head_dim"] = cfg.head_size();
  c["max_position_embeddings"] = cfg.max_seq_len;
  c["vocab_size"] = cfg.vocab_size;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = cfg.norm_eps;
  c["rope_theta"] = cfg.rope_theta;
  c["rope_scaling"] = nullptr;
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["tie_word_embeddings"] = cfg.tied;
  // bos/eos: the last token, the end of text of GPT-2's vocabulary (50256) and of the byte
  // tokenizer (256).
  c["bos_token_id"] = cfg.vocab_size - 1;
  c["eos_token_id"] = cfg.vocab_size - 1;
  c["torch_dtype"] = dtype == Precision::fp32 ? "float32" : "bfloat16";
  return c.dump(2) + "\n";
}

struct HfLlamaWriter::Impl {
  std::string dir;
  ModelConfig cfg;
  Precision dtype;
  ParamLayout layout;
  std::vector<std::vector<HfPiece>> pieces;  // per layout tensor
  std::vector<size_t> first_piece;           // per layout tensor: its first piece's index in the file
  std::unique_ptr<SafetensorsWriter> file;
  size_t written = 0;
  std::vector<bf16> raw;  // bf16 rounding buffer (fixed size)
};

HfLlamaWriter::HfLlamaWriter(const std::string& dir, const ModelConfig& cfg_in, Precision dtype)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dir = dir;
  m.cfg = cfg_in;
  finalize_config(m.cfg);
  RZ_CHECK(m.cfg.family == ModelFamily::llama, "HfLlamaWriter: a %s model is not of the llama family",
           family_name(m.cfg.family));
  m.dtype = dtype;
  m.layout = build_param_layout(m.cfg);
  // The pieces in layout order, so that a layout range maps to one stretch of the file per piece.
  std::vector<SafeTensorSpec> specs;
  const SafeDType sd = dtype == Precision::fp32 ? SafeDType::F32 : SafeDType::BF16;
  for (const ParamTensor& t : m.layout.tensors) {
    m.first_piece.push_back(specs.size());
    m.pieces.push_back(hf_llama_pieces(m.cfg, t));
    for (const HfPiece& p : m.pieces.back()) specs.push_back({p.name, sd, p.shape});
  }
  m.file = std::make_unique<SafetensorsWriter>((fs::path(dir) / kHfWeightsName).string(), specs,
                                               std::map<std::string, std::string>{{"format", "pt"}});
}

HfLlamaWriter::~HfLlamaWriter() = default;

void HfLlamaWriter::write(size_t begin, const float* data, size_t n) {
  Impl& m = *impl_;
  const auto& ts = m.layout.tensors;
  RZ_CHECK(begin <= m.layout.total && n <= m.layout.total - begin, "%s: parameters [%zu, +%zu) outside the %zu",
           m.dir.c_str(), begin, n, m.layout.total);
  const size_t esize = precision_bytes(m.dtype), end = begin + n;
  size_t i = static_cast<size_t>(std::upper_bound(ts.begin(), ts.end(), begin, [](size_t off, const ParamTensor& t) {
                                   return off < t.offset + t.numel;
                                 }) - ts.begin());
  for (; i < ts.size() && ts[i].offset < end; ++i) {
    const ParamTensor& t = ts[i];
    const size_t rl = row_len(t);
    for (size_t j = 0; j < m.pieces[i].size(); ++j) {
      const HfPiece& p = m.pieces[i][j];
      // The piece's elements in layout coordinates, cut to the range given.
      const size_t pb = t.offset + p.first_row * rl, pe = pb + static_cast<size_t>(piece_numel(p));
      const size_t a = std::max(begin, pb), e = std::min(end, pe);
      if (a >= e) continue;
      const float* src = data + (a - begin);
      const uint64_t at = static_cast<uint64_t>(a - pb) * esize;
      if (m.dtype == Precision::fp32) {
        m.file->write(m.first_piece[i] + j, at, src, (e - a) * sizeof(float));
        continue;
      }
      constexpr size_t kRaw = 1 << 15;
      if (m.raw.empty()) m.raw.resize(kRaw);
      for (size_t k0 = 0; k0 < e - a; k0 += kRaw) {
        const size_t k = std::min(kRaw, e - a - k0);
        for (size_t q = 0; q < k; ++q) m.raw[q] = float_to_bf16(src[k0 + q]);
        m.file->write(m.first_piece[i] + j, at + k0 * sizeof(bf16), m.raw.data(), k * sizeof(bf16));
      }
    }
  }
  m.written += n;
}

void HfLlamaWriter::commit() {
  Impl& m = *impl_;
  RZ_CHECK(m.written == m.layout.total, "%s: %zu of %zu parameters written", m.dir.c_str(), m.written, m.layout.total);
  m.file->commit();
  write_file_atomic((fs::path(m.dir) / kHfConfigName).string(), hf_llama_config_text(m.cfg, m.dtype));
}

}  // namespace rz
