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
#include "model/json_input.h"
#include "model/safetensors.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

using json = nlohmann::json;

constexpr const char* kConfigName = "config.json";
constexpr const char* kWeightsName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kPrefix = "transformer.";
// config.json and the index are small; these bounds only stop a hostile one early.
constexpr size_t kMaxConfigBytes = size_t{1} << 20, kMaxIndexBytes = size_t{64} << 20;
constexpr int kMaxJsonDepth = 16;
constexpr size_t kMaxShards = 4096;  // each is an open file while the model is read

// The tanh-approximated GELU under both the names transformers gives it.
bool is_tanh_gelu(const std::string& a) { return a == "gelu_new" || a == "gelu_pytorch_tanh"; }

// A positive integer field (at most INT_MAX), or `fallback` when absent (transformers'
// GPT2Config default) or null.
int int_field(const json& c, const char* key, int fallback, const std::string& path) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  RZ_CHECK(v.is_number_unsigned() && v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= INT_MAX,
           "config.json %s: %s is %s, expected a positive integer", path.c_str(), key,
           printable_name(v.dump().substr(0, 40)).c_str());
  return static_cast<int>(v.get<uint64_t>());
}

template <typename T>
std::optional<T> typed_field(const json& c, const char* key, const char* type, const std::string& path) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  const json& v = c[key];
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean() : std::is_same_v<T, double> ? v.is_number() : v.is_string();
  RZ_CHECK(ok, "config.json %s: %s is %s, expected %s", path.c_str(), key, printable_name(v.dump().substr(0, 40)).c_str(),
           type);
  return v.get<T>();
}

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s.size() <= 255 && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// A file name read from a file, quoted for a message.
std::string shown(const std::string& s) { return printable_name(s); }

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

// The directory's weight files, opened; name (without prefix) -> (file, tensor).
struct OpenWeights {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  struct Where {
    const SafetensorsFile* file;
    const SafeTensorInfo* info;
  };
  std::map<std::string, Where> by_name;
};

std::string strip_prefix(const std::string& n) {
  return n.rfind(kPrefix, 0) == 0 ? n.substr(std::strlen(kPrefix)) : n;
}

OpenWeights open_weights(const HfGpt2Dir& d, const std::string& dir) {
  OpenWeights w;
  std::map<std::string, std::string> weight_map;  // sharded: tensor -> shard name
  const bool sharded = d.weight_files.size() != 1 || fs::path(d.weight_files[0]).filename() != kWeightsName;
  const std::string index_path = (fs::path(dir) / kIndexName).string();
  if (sharded) weight_map = parse_hf_weight_map(read_untrusted_json_file(index_path, kMaxIndexBytes, kMaxJsonDepth, "index").dump(), index_path);
  std::map<std::string, std::string> seen_in;  // name without prefix -> the file it came from
  for (const std::string& path : d.weight_files) {
    w.files.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile& f = *w.files.back();
    const std::string base = fs::path(path).filename().string();
    for (const SafeTensorInfo& t : f.tensors()) {
      if (sharded) {
        const auto it = weight_map.find(t.name);
        RZ_CHECK(it != weight_map.end(), "%s: tensor '%s' is in shard %s, but %s does not list it", dir.c_str(),
                 shown(t.name).c_str(), base.c_str(), kIndexName);
        RZ_CHECK(it->second == base, "%s: tensor '%s' is in shard %s, but %s maps it to %s", dir.c_str(),
                 shown(t.name).c_str(), base.c_str(), kIndexName, shown(it->second).c_str());
      }
      const std::string name = strip_prefix(t.name);
      const auto [it, fresh] = seen_in.emplace(name, path);
      RZ_CHECK(fresh, "%s: tensor '%s' appears twice (in %s and %s, with or without the '%s' prefix)", dir.c_str(),
               shown(name).c_str(), it->second.c_str(), path.c_str(), kPrefix);
      w.by_name[name] = {&f, &t};
    }
  }
  for (const auto& [name, shard] : weight_map) {
    const auto it = w.by_name.find(strip_prefix(name));
    RZ_CHECK(it != w.by_name.end() && it->second.info->name == name, "%s: %s maps tensor '%s' to %s, which does not hold it",
             dir.c_str(), kIndexName, shown(name).c_str(), shown(shard).c_str());
  }
  return w;
}

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
  }
  RZ_FAIL("hf_gpt2_tensor_name: unknown parameter kind %d", static_cast<int>(t.kind));
}

GPT2Config parse_hf_gpt2_config(std::string_view text, const std::string& path) {
  const json c = parse_untrusted_json(text, kMaxJsonDepth, "config.json", path);
  const char* p = path.c_str();
  RZ_CHECK(c.is_object(), "config.json %s: not a JSON object", p);
  const auto model_type = typed_field<std::string>(c, "model_type", "a string", path);
  RZ_CHECK(model_type.has_value(), "config.json %s: no model_type (ringzero reads model_type gpt2)", p);
  RZ_CHECK(*model_type == "gpt2", "config.json %s: model_type '%s' is not GPT-2; ringzero reads model_type gpt2 only", p,
           shown(*model_type).c_str());
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
  cfg.num_layers = int_field(c, "n_layer", 12, path);
  cfg.num_heads = int_field(c, "n_head", 12, path);
  cfg.channels = int_field(c, "n_embd", 768, path);
  cfg.vocab_size = int_field(c, "vocab_size", 50257, path);
  cfg.max_seq_len = int_field(c, "n_positions", int_field(c, "n_ctx", 1024, path), path);
  const double eps = typed_field<double>(c, "layer_norm_epsilon", "a number", path).value_or(1e-5);
  RZ_CHECK(eps == 1e-5, "config.json %s: layer_norm_epsilon %g, but ringzero's layernorm uses 1e-5", p, eps);
  const std::string act = typed_field<std::string>(c, "activation_function", "a string", path).value_or("gelu_new");
  RZ_CHECK(is_tanh_gelu(act),
           "config.json %s: activation_function '%s', but ringzero computes gelu_new (GELU, tanh approximation)", p,
           shown(act).c_str());
  RZ_CHECK(typed_field<bool>(c, "tie_word_embeddings", "true or false", path).value_or(true),
           "config.json %s: tie_word_embeddings is false, but ringzero's classifier is always the token embedding wte",
           p);
  if (c.contains("n_inner") && !c["n_inner"].is_null()) {
    const int inner = int_field(c, "n_inner", 0, path);
    RZ_CHECK(static_cast<long long>(inner) == 4LL * cfg.channels,
             "config.json %s: n_inner %d, but ringzero's MLP is 4 x n_embd = %lld wide", p, inner, 4LL * cfg.channels);
  }
  RZ_CHECK(typed_field<bool>(c, "scale_attn_weights", "true or false", path).value_or(true),
           "config.json %s: scale_attn_weights is false, but ringzero scales attention by 1/sqrt(head size)", p);
  RZ_CHECK(!typed_field<bool>(c, "scale_attn_by_inverse_layer_idx", "true or false", path).value_or(false),
           "config.json %s: scale_attn_by_inverse_layer_idx is true, which ringzero's attention does not do", p);
  RZ_CHECK(!typed_field<bool>(c, "add_cross_attention", "true or false", path).value_or(false),
           "config.json %s: add_cross_attention is true (an encoder-decoder GPT-2), which ringzero does not have", p);
  try {
    finalize_config(cfg);
  } catch (const Error& e) {
    RZ_FAIL("config.json %s: %s", p, e.what());
  }
  return cfg;
}

std::map<std::string, std::string> parse_hf_weight_map(std::string_view text, const std::string& path) {
  const json j = parse_untrusted_json(text, kMaxJsonDepth, "index", path);
  const char* p = path.c_str();
  RZ_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
           "index %s: no \"weight_map\" object (tensor name -> shard file)", p);
  std::map<std::string, std::string> out;
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    RZ_CHECK(file.is_string(), "index %s: tensor '%s' maps to %s, expected a file name", p, shown(name).c_str(),
             shown(file.dump().substr(0, 40)).c_str());
    const std::string f = file.get<std::string>();
    RZ_CHECK(is_plain_file_name(f),
             "index %s: tensor '%s' maps to '%s', which is not a plain file name inside the directory (no '/', '\\', "
             "'..' or NUL)", p, shown(name).c_str(), shown(f).c_str());
    RZ_CHECK(f != kIndexName && f != kConfigName, "index %s: tensor '%s' maps to %s, which is not a weight file", p,
             shown(name).c_str(), f.c_str());
    shards.insert(f);
    RZ_CHECK(shards.size() <= kMaxShards, "index %s: more than %zu shard files", p, kMaxShards);
    out[name] = f;
  }
  RZ_CHECK(!out.empty(), "index %s: weight_map is empty", p);
  return out;
}

HfGpt2Dir inspect_hf_gpt2(const std::string& dir) {
  struct stat st {};
  RZ_CHECK(::stat(dir.c_str(), &st) == 0, "hf:%s: cannot open: %s", dir.c_str(), errno_string().c_str());
  RZ_CHECK(S_ISDIR(st.st_mode), "hf:%s: not a directory (hf: names a Hugging Face model directory)", dir.c_str());
  HfGpt2Dir d;
  const std::string config = (fs::path(dir) / kConfigName).string();
  RZ_CHECK(fs::exists(fs::symlink_status(config)), "hf:%s: no config.json in it (not a Hugging Face model directory)",
           dir.c_str());
  const json c = read_untrusted_json_file(config, kMaxConfigBytes, kMaxJsonDepth, "config.json");
  d.cfg = parse_hf_gpt2_config(c.dump(), config);
  d.files.push_back(config);
  const std::string single = (fs::path(dir) / kWeightsName).string(), index = (fs::path(dir) / kIndexName).string();
  if (fs::exists(fs::symlink_status(single))) {  // transformers prefers it over an index too
    d.weight_files.push_back(single);
  } else if (fs::exists(fs::symlink_status(index))) {
    const json j = read_untrusted_json_file(index, kMaxIndexBytes, kMaxJsonDepth, "index");
    std::set<std::string> shards;
    for (const auto& [name, file] : parse_hf_weight_map(j.dump(), index)) shards.insert(file);
    d.files.push_back(index);
    for (const std::string& s : shards) d.weight_files.push_back((fs::path(dir) / s).string());
  } else {
    const bool pickle = fs::exists(fs::path(dir) / "pytorch_model.bin");
    RZ_FAIL("hf:%s: neither %s nor %s in it%s", dir.c_str(), kWeightsName, kIndexName,
            pickle ? " (its pytorch_model.bin is a Python pickle, which ringzero does not read: save the model with "
                     "safe_serialization, or convert it with the safetensors package)"
                   : "");
  }
  for (const std::string& w : d.weight_files) d.files.push_back(w);
  return d;
}

HfGpt2Dir read_hf_gpt2(const std::string& dir, const ParamChunkSink& sink) {
  HfGpt2Dir d = inspect_hf_gpt2(dir);
  const GPT2Config& cfg = d.cfg;
  const ParamLayout lay = build_param_layout(cfg);
  const NameTable table(cfg, lay);
  const OpenWeights w = open_weights(d, dir);
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
  // The directory: new, empty, or (overwrite) with its stale model files removed.
  const fs::file_status st = fs::symlink_status(dir);
  if (fs::exists(st)) {
    RZ_CHECK(fs::is_directory(st), "hf:%s: exists and is %s, not a directory", dir.c_str(),
             non_regular_kind(dir).empty() ? "a file" : non_regular_kind(dir).c_str());
    if (!fs::is_empty(dir)) {
      RZ_CHECK(overwrite, "hf:%s: exists and is not empty (--overwrite replaces its model files)", dir.c_str());
      const std::string index = (fs::path(dir) / kIndexName).string();
      if (fs::is_regular_file(fs::symlink_status(index))) {
        std::map<std::string, std::string> old;
        try {
          old = parse_hf_weight_map(read_untrusted_json_file(index, kMaxIndexBytes, kMaxJsonDepth, "index").dump(), index);
        } catch (const Error&) {
          // unreadable: only the index itself goes
        }
        for (const auto& [name, shard] : old) {
          const fs::path s = fs::path(dir) / shard;
          if (fs::is_regular_file(fs::symlink_status(s))) fs::remove(s);
        }
        fs::remove(index);
      }
    }
  } else {
    fs::create_directories(dir);
  }
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
  write_safetensors((fs::path(dir) / kWeightsName).string(), specs, {{"format", "pt"}},
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
  write_file_atomic((fs::path(dir) / kConfigName).string(), c.dump(2) + "\n");
}

}  // namespace rz
