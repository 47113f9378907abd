// train/model_source.h: where a model's weights come from (train --init, sample, verify,
// eval and export --model, comm-bench --init), parsed once into a typed source.
//
//   M.bin       an llm.c model file (version 3 fp32 or 5 bf16; model/llmc_file.h)
//   DIR         a checkpoint directory: a step_NNNNNNNN/ that `train --save-dir` wrote (its
//               model files, model/saved_model.h: model.bin for GPT-2, config.json +
//               model.safetensors for Llama, checked against its COMPLETE manifest), or a
//               save_dir itself (its newest complete checkpoint)
//   hf:DIR      a Hugging Face GPT-2 or Llama directory: config.json + model.safetensors, or
//               the sharded form with model.safetensors.index.json (model/hf_model.h)
// parse_model_source only tells the three apart (the prefix, or whether the path is a
// directory); the readers below check the files and name what is wrong.
#pragma once

#include <string>
#include <vector>

#include "base/file.h"
#include "model/config.h"
#include "model/llmc_file.h"

namespace rz {

enum class ModelSourceKind : int { none, llmc, checkpoint, hf };

struct ModelSource {
  ModelSourceKind kind = ModelSourceKind::none;
  std::string spec;  // as given ("hf:gpt2"), which model_source_name gives back
  std::string path;  // the .bin file, the checkpoint or save directory, or (hf) DIR
  bool empty() const { return kind == ModelSourceKind::none; }
  bool operator==(const ModelSource& o) const { return spec == o.spec; }
};

// "" -> none. Throws "expected ..., found 'hf:'" for an hf: without a directory.
ModelSource parse_model_source(const std::string& spec);
std::string model_source_name(const ModelSource& s);  // s.spec
// For --help: what a model source may be, in one line.
extern const char* const kModelSourceHelp;

// The model's shape (finalized), reading only headers (and, for hf:, config.json and each
// weight file's header).
GPT2Config read_model_source_config(const ModelSource& s);
// Streams every parameter in the internal layout (as read_model_file_chunks, model/llmc_file.h).
// Returns the shape.
GPT2Config read_model_source(const ModelSource& s, const ParamChunkSink& sink);
// All parameters at once (num_parameters(cfg) floats, internal layout); *cfg gets the shape.
std::vector<float> read_model_source_params(const ModelSource& s, GPT2Config* cfg);

// The files reading s opens (and, for a directory, the directory), each as {what, path}, for
// base/file.h's check that no output replaces an input. What cannot be resolved yet (a missing
// file, a damaged hf: directory) adds the path as given: its reader names the problem later.
std::vector<RunPath> model_source_inputs(const ModelSource& s, const char* what);

}  // namespace rz
