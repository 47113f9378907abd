// train/model_source_read.cpp: reading a model source (see model_source.h).
#include <algorithm>
#include <filesystem>

#include "base/check.h"
#include "base/memory.h"
#include "model/hf_model.h"
#include "model/saved_model.h"
#include "model/layout.h"
#include "train/checkpoint.h"
#include "train/model_source.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

// A checkpoint source's step directory: the directory itself when it is one (model.bin, or
// the llama family's config.json + model.safetensors beside a COMPLETE manifest: a plain
// Hugging Face directory is hf:DIR's), else its newest complete checkpoint (a save_dir).
// With a COMPLETE manifest beside them, the model's files must be the ones the manifest lists
// (size and checksum), so a damaged checkpoint is named as such. verify false: the directory
// only (a header read; the full read verifies).
std::string checkpoint_dir(const std::string& dir, bool verify) {
  std::string step_dir = dir;
  auto has = [&](const char* name) { return fs::exists(fs::symlink_status(fs::path(dir) / name)); };
  if (!has("model.bin") && !(has("config.json") && has("COMPLETE"))) {
    const auto done = list_complete_checkpoints(dir);
    if (done.empty()) {
      RZ_FAIL("%s: a directory with neither model.bin nor a complete checkpoint (step_NNNNNNNN/ with COMPLETE)%s",
              dir.c_str(), has("config.json") ? strfmt("; for a Hugging Face directory write hf:%s", dir.c_str()).c_str() : "");
    }
    step_dir = done.back().second;
  }
  if (verify && fs::exists(fs::symlink_status(fs::path(step_dir) / "COMPLETE"))) {
    const CheckpointManifest m = read_manifest(step_dir);
    const std::vector<std::string> paths = saved_model_paths(step_dir);
    RZ_CHECK(!paths.empty(), "%s: holds no model (neither model.bin nor config.json)", step_dir.c_str());
    for (const std::string& model : paths) {
      const std::string name = fs::path(model).filename().string();
      const auto it = std::find_if(m.files.begin(), m.files.end(), [&](const auto& f) { return f.first == name; });
      RZ_CHECK(it != m.files.end(), "%s: its COMPLETE manifest does not list %s", step_dir.c_str(), name.c_str());
      check_input_file(model, "model file");
      const uint64_t bytes = fs::file_size(model), sum = file_fnv64(model);
      RZ_CHECK(bytes == it->second.first && sum == it->second.second,
               "%s: %llu bytes with checksum %016llx, but the checkpoint's manifest says %llu bytes, %016llx: the "
               "checkpoint is damaged", model.c_str(), static_cast<unsigned long long>(bytes),
               static_cast<unsigned long long>(sum), static_cast<unsigned long long>(it->second.first),
               static_cast<unsigned long long>(it->second.second));
    }
  }
  return step_dir;
}

}  // namespace

GPT2Config read_model_source_config(const ModelSource& s) {
  RZ_CHECK(!s.empty(), "no model source given");
  if (s.kind == ModelSourceKind::hf) return inspect_hf_model(s.path).cfg;
  if (s.kind == ModelSourceKind::checkpoint) return read_saved_model_config(checkpoint_dir(s.path, false));
  return read_model_header(s.path).cfg;
}

GPT2Config read_model_source(const ModelSource& s, const ParamChunkSink& sink) {
  RZ_CHECK(!s.empty(), "no model source given");
  if (s.kind == ModelSourceKind::hf) return read_hf_model(s.path, sink).cfg;
  if (s.kind == ModelSourceKind::checkpoint) return read_saved_model(checkpoint_dir(s.path, true), sink);
  return read_model_file_chunks(s.path, sink).cfg;
}

std::vector<float> read_model_source_params(const ModelSource& s, GPT2Config* cfg) {
  std::vector<float> params;
  resize_or_fail(params, num_parameters(read_model_source_config(s)), "the model's parameters");
  const GPT2Config c = read_model_source(s, [&](size_t begin, const float* data, size_t n) {
    RZ_CHECK(begin <= params.size() && n <= params.size() - begin, "model source %s changed while it was read",
             s.spec.c_str());
    std::copy(data, data + n, params.begin() + static_cast<std::ptrdiff_t>(begin));
  });
  if (cfg != nullptr) *cfg = c;
  return params;
}

std::vector<RunPath> model_source_inputs(const ModelSource& s, const char* what) {
  std::vector<RunPath> in;
  if (s.empty()) return in;
  try {
    if (s.kind == ModelSourceKind::hf) {
      in.push_back({what, s.path});
      for (const std::string& f : inspect_hf_model(s.path).files) in.push_back({what, f});
    } else if (s.kind == ModelSourceKind::checkpoint) {
      in.push_back({what, s.path});
      for (const std::string& f : saved_model_paths(checkpoint_dir(s.path, false))) in.push_back({what, f});
    } else {
      in.push_back({what, s.path});
    }
  } catch (const Error&) {
    if (in.empty()) in.push_back({what, s.path});
  }
  return in;
}

}  // namespace rz
