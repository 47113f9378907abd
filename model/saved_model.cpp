// model/saved_model.cpp: a model's files inside a directory, by family (see saved_model.h).
#include "model/saved_model.h"

#include <filesystem>

#include "base/check.h"
#include "model/hf_dir.h"
#include "model/hf_llama.h"
#include "model/hf_model.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

constexpr const char* kLlmcName = "model.bin";

bool has(const std::string& dir, const char* name) { return fs::exists(fs::symlink_status(fs::path(dir) / name)); }

class LlmcWriter final : public SavedModelWriter {
 public:
  LlmcWriter(const std::string& path, const ModelConfig& cfg, Precision p) : w_(path, cfg, p) {}
  void write(size_t begin, const float* data, size_t n) override { w_.write(begin, data, n); }
  void commit() override { w_.commit(); }

 private:
  ModelFileWriter w_;
};

class HfWriter final : public SavedModelWriter {
 public:
  HfWriter(const std::string& dir, const ModelConfig& cfg, Precision p) : w_(dir, cfg, p) {}
  void write(size_t begin, const float* data, size_t n) override { w_.write(begin, data, n); }
  void commit() override { w_.commit(); }

 private:
  HfLlamaWriter w_;
};

}  // namespace

std::vector<std::string> saved_model_files(const ModelConfig& cfg) {
  if (cfg.family == ModelFamily::gpt2) return {kLlmcName};
  return {kHfWeightsName, kHfConfigName};
}

const std::vector<std::string>& all_saved_model_files() {
  static const std::vector<std::string> names = {kLlmcName, kHfWeightsName, kHfConfigName};
  return names;
}

std::vector<std::string> saved_model_paths(const std::string& dir) {
  if (has(dir, kLlmcName)) return {(fs::path(dir) / kLlmcName).string()};
  if (has(dir, kHfConfigName)) {
    std::vector<std::string> out;
    for (const std::string& f : inspect_hf_model(dir).files) out.push_back(f);
    return out;
  }
  return {};
}

ModelConfig read_saved_model_config(const std::string& dir) {
  if (has(dir, kLlmcName)) return read_model_header((fs::path(dir) / kLlmcName).string()).cfg;
  RZ_CHECK(has(dir, kHfConfigName), "%s: holds no model (neither model.bin nor config.json)", dir.c_str());
  return inspect_hf_model(dir).cfg;
}

ModelConfig check_saved_model(const std::string& dir) {
  const ModelConfig cfg = read_saved_model_config(dir);  // model.bin: its length checked against its header
  if (has(dir, kLlmcName)) return cfg;
  // Every element of the shape's tensors but the vocabulary's padding rows, which the files
  // leave out.
  const ParamLayout lay = build_param_layout(cfg);
  uint64_t want = 0, have = 0;
  for (const ParamTensor& t : lay.tensors) {
    const bool vocab_rows = t.kind == ParamKind::wte || t.kind == ParamKind::lmhead;
    want += vocab_rows ? uint64_t(cfg.vocab_size) * uint64_t(cfg.channels) : t.numel;
  }
  for (const std::string& w : inspect_hf_model(dir).weight_files) {
    const SafetensorsFile f(w);
    for (const SafeTensorInfo& t : f.tensors()) have += t.numel;
  }
  const bool tied_copy = cfg.tied && have == want + uint64_t(cfg.vocab_size) * uint64_t(cfg.channels);  // a tied lm_head
  RZ_CHECK(have == want || tied_copy, "%s: its weights hold %llu elements, but config.json's shape (%s) needs %llu",
           dir.c_str(), static_cast<unsigned long long>(have), describe_shape(cfg).c_str(),
           static_cast<unsigned long long>(want));
  return cfg;
}

ModelConfig read_saved_model(const std::string& dir, const ParamChunkSink& sink) {
  if (has(dir, kLlmcName)) return read_model_file_chunks((fs::path(dir) / kLlmcName).string(), sink).cfg;
  RZ_CHECK(has(dir, kHfConfigName), "%s: holds no model (neither model.bin nor config.json)", dir.c_str());
  return read_hf_model(dir, sink).cfg;
}

std::unique_ptr<SavedModelWriter> make_saved_model_writer(const std::string& dir, const ModelConfig& cfg,
                                                          Precision precision) {
  if (cfg.family == ModelFamily::gpt2)
    return std::make_unique<LlmcWriter>((fs::path(dir) / kLlmcName).string(), cfg, precision);
  return std::make_unique<HfWriter>(dir, cfg, precision);
}

}  // namespace rz
