// model/saved_model.h: a model's files inside a directory ringzero writes (a checkpoint's
// step directory), in its family's format.
//
//   gpt2    model.bin                          llm.c's model file (model/llmc_file.h): llm.c and
//                                              every ringzero since the first read it
//   llama   config.json + model.safetensors    a Hugging Face directory (model/hf_llama.h):
//                                              transformers' from_pretrained loads the step
//                                              directory as it is
// llm.c's .bin cannot carry rotary embeddings, grouped kv heads or an untied classifier; a
// Hugging Face directory carries them, is versioned by its config.json, and has a reader
// that checks every byte of it (model/safetensors.h). A reader of the other family's files
// refuses with one line (an llm.c reader given model.safetensors names it as a safetensors
// file; a directory without model.bin is named as such by the older code paths).
// Which family a directory holds is what it holds: model.bin, or config.json.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/llmc_file.h"

namespace rz {

// The file names a directory holds for a model of cfg's family, in the order they are written.
std::vector<std::string> saved_model_files(const ModelConfig& cfg);
// Every name saved_model_files gives for some family (what a checkpoint may list).
const std::vector<std::string>& all_saved_model_files();

// Whether dir holds a saved model (model.bin, or config.json), and its files' paths.
std::vector<std::string> saved_model_paths(const std::string& dir);  // empty: none

// The shape of the model saved in dir (headers and config.json only); throws naming dir when
// it holds none.
ModelConfig read_saved_model_config(const std::string& dir);
// read_saved_model_config, and the files' sizes against that shape, without reading the
// weights: model.bin's length against its header; model.safetensors' header (checked and
// tiled as model/safetensors.h does) holding as many elements as the shape's tensors.
ModelConfig check_saved_model(const std::string& dir);
// Streams its parameters in the internal layout; returns the shape.
ModelConfig read_saved_model(const std::string& dir, const ParamChunkSink& sink);

// The family's files in dir, written a chunk at a time in any order (ModelFileWriter's
// contract: write(begin, data, n) with internal-layout elements, commit() checks that every
// parameter came once and puts the files in place atomically).
class SavedModelWriter {
 public:
  virtual ~SavedModelWriter() = default;
  virtual void write(size_t begin, const float* data, size_t n) = 0;
  virtual void commit() = 0;
};
std::unique_ptr<SavedModelWriter> make_saved_model_writer(const std::string& dir, const ModelConfig& cfg,
                                                          Precision precision);

}  // namespace rz
