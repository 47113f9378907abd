// train/model_source.cpp: telling the model sources apart (see model_source.h). Reading them
// is model_source_read.cpp's, so the settings table (train/config.cpp) needs only this file.
#include "train/model_source.h"

#include <sys/stat.h>

#include "base/check.h"

namespace rz {

const char* const kModelSourceHelp =
    "an llm.c model .bin (GPT-2), a checkpoint directory (step_NNNNNNNN/, or a save_dir: its newest complete "
    "checkpoint; either family) or hf:DIR (a Hugging Face GPT-2 or Llama directory: config.json + "
    "model.safetensors, or sharded with model.safetensors.index.json)";

ModelSource parse_model_source(const std::string& spec) {
  ModelSource s;
  s.spec = spec;
  if (spec.empty()) return s;
  if (spec.rfind("hf:", 0) == 0) {
    s.kind = ModelSourceKind::hf;
    s.path = spec.substr(3);
    RZ_CHECK(!s.path.empty(), "expected hf:DIR (a Hugging Face model directory), found '%s'", spec.c_str());
    return s;
  }
  s.path = spec;
  struct stat st {};
  s.kind = ::stat(spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? ModelSourceKind::checkpoint : ModelSourceKind::llmc;
  return s;
}

std::string model_source_name(const ModelSource& s) { return s.spec; }

}  // namespace rz
