// model/hf_model.h: a Hugging Face directory of any family ringzero knows, picked by
// config.json's model_type: gpt2 (model/hf_gpt2.h) or llama (model/hf_llama.h). The model
// sources (hf:DIR), `export --to hf:DIR` and the llama family's checkpoints go through here.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/llmc_file.h"

namespace rz {

struct HfModelDir {
  ModelConfig cfg;
  std::vector<std::string> files;         // every file a read opens, config.json first
  std::vector<std::string> weight_files;  // model.safetensors, or the shards in name order
};
// The shape, from config.json (and the index); an unknown model_type is one line naming it
// and the ones ringzero reads.
HfModelDir inspect_hf_model(const std::string& dir);

// Streams every parameter into the internal layout (sink as read_model_file_chunks's).
HfModelDir read_hf_model(const std::string& dir, const ParamChunkSink& sink);

// Writes config.json and model.safetensors into dir (see write_hf_gpt2 for the directory's
// rules, the same for every family), the tensors in `dtype`, from params_internal
// (num_parameters(cfg) floats, internal layout).
void write_hf_model(const std::string& dir, const ModelConfig& cfg, Precision dtype, const float* params_internal,
                    bool overwrite);

}  // namespace rz
