// train/model_source_read.cpp: reading a model source (see model_source.h).
#include <algorithm>
#include <filesystem>

#include "base/check.h"
#include "base/memory.h"
#include "model/hf_gpt2.h"
#include "model/layout.h"
#include "train/checkpoint.h"
#include "train/model_source.h"

namespace fs = std::filesystem;

namespace rz {

namespace {

// A checkpoint source's model.bin: the directory's own (a step directory), else its newest
// complete checkpoint's (a save_dir). With a COMPLETE manifest beside it, the file must be the
// one the manifest lists (size and checksum), so a damaged checkpoint is named as such.
// verify false: the path only (a header read; the full read verifies).
std::string checkpoint_model(const std::string& dir, bool verify) {
  std::string step_dir = dir;
  if (!fs::exists(fs::symlink_status(fs::path(dir) / "model.bin"))) {
    const auto done = list_complete_checkpoints(dir);
    if (done.empty()) {
      const bool hf = fs::exists(fs::path(dir) / "config.json");
      RZ_FAIL("%s: a directory with neither model.bin nor a complete checkpoint (step_NNNNNNNN/ with COMPLETE)%s",
              dir.c_str(), hf ? strfmt("; for a Hugging Face directory write hf:%s", dir.c_str()).c_str() : "");
    }
    step_dir = done.back().second;
  }
  const std::string model = (fs::path(step_dir) / "model.bin").string();
  if (verify && fs::exists(fs::symlink_status(fs::path(step_dir) / "COMPLETE"))) {
    const CheckpointManifest m = read_manifest(step_dir);
    const auto it = std::find_if(m.files.begin(), m.files.end(), [](const auto& f) { return f.first == "model.bin"; });
    RZ_CHECK(it != m.files.end(), "%s: its COMPLETE manifest does not list model.bin", step_dir.c_str());
    check_input_file(model, "model file");
    const uint64_t bytes = fs::file_size(model), sum = file_fnv64(model);
    RZ_CHECK(bytes == it->second.first && sum == it->second.second,
             "%s: %llu bytes with checksum %016llx, but the checkpoint's manifest says %llu bytes, %016llx: the "
             "checkpoint is damaged", model.c_str(), static_cast<unsigned long long>(bytes),
             static_cast<unsigned long long>(sum), static_cast<unsigned long long>(it->second.first),
             static_cast<unsigned long long>(it->second.second));
  }
  return model;
}

// The llm.c file a .bin or checkpoint source reads.
std::string llmc_file_of(const ModelSource& s, bool verify) {
  return s.kind == ModelSourceKind::checkpoint ? checkpoint_model(s.path, verify) : s.path;
}

}  // namespace

GPT2Config read_model_source_config(const ModelSource& s) {
  RZ_CHECK(!s.empty(), "no model source given");
  if (s.kind == ModelSourceKind::hf) return inspect_hf_gpt2(s.path).cfg;
  return read_model_header(llmc_file_of(s, false)).cfg;
}

GPT2Config read_model_source(const ModelSource& s, const ParamChunkSink& sink) {
  RZ_CHECK(!s.empty(), "no model source given");
  if (s.kind == ModelSourceKind::hf) return read_hf_gpt2(s.path, sink).cfg;
  return read_model_file_chunks(llmc_file_of(s, true), sink).cfg;
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
      for (const std::string& f : inspect_hf_gpt2(s.path).files) in.push_back({what, f});
    } else if (s.kind == ModelSourceKind::checkpoint) {
      in.push_back({what, s.path});
      const std::string model = fs::exists(fs::path(s.path) / "model.bin")
                                    ? (fs::path(s.path) / "model.bin").string()
                                    : list_complete_checkpoints(s.path).empty()
                                          ? std::string()
                                          : (fs::path(list_complete_checkpoints(s.path).back().second) / "model.bin").string();
      if (!model.empty()) in.push_back({what, model});
    } else {
      in.push_back({what, s.path});
    }
  } catch (const Error&) {
    if (in.empty()) in.push_back({what, s.path});
  }
  return in;
}

}  // namespace rz
