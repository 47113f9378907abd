// model/hf_gpt2.h: Hugging Face GPT-2 directories (transformers' GPT2LMHeadModel), read and
// written.
//
// A directory holds config.json and either model.safetensors or the sharded form:
// model.safetensors.index.json, whose "weight_map" names each tensor's shard, a plain file
// name inside the directory. config.json gives the shape (n_layer, n_head, n_embd,
// n_positions (n_ctx in older files), vocab_size) and must describe what ringzero computes:
// model_type gpt2, layer_norm_epsilon 1e-5, activation gelu_new (the tanh GELU; its other
// name gelu_pytorch_tanh too), tied word embeddings, n_inner 4 x n_embd, scaled attention
// without the per-layer scaling, no cross-attention. Anything else is refused by name.
//
// Names and layout. transformers stores the attention and MLP weights as Conv1D, (in, out),
// where ringzero (as llm.c) keeps nn.Linear's (out, in): they are transposed on the way in
// and out. Names come with or without the "transformer." prefix (GPT2LMHeadModel's files
// have it, GPT2Model's and older uploads do not). lm_head is tied to wte: recent transformers
// leave it out of the file; when present it must equal wte, since ringzero's classifier is
// wte itself. Older files carry the attention's causal mask (h.N.attn.bias) and
// h.N.attn.masked_bias, buffers rather than parameters: skipped. Any other tensor, a missing
// one, a shape that disagrees with config.json or a dtype other than F32, F16 or BF16 is
// refused naming the file and the tensor. The vocabulary is padded as model/config.cpp pads
// it (Vp = V rounded up to 64): the padding rows of wte are zero on import and dropped on
// export.
//
// Writing gives what transformers' save_pretrained gives (config.json and one
// model.safetensors with "transformer."-prefixed names, no lm_head, metadata format "pt"), in
// F32 or BF16, each file written atomically.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/hf_dir.h"
#include "model/layout.h"
#include "model/llmc_file.h"

namespace rz {

// A parameter's name and shape in a GPT2LMHeadModel file (without the "transformer." prefix),
// and whether it is stored transposed against ringzero's (a Conv1D weight).
struct HfTensorName {
  std::string name;             // "h.3.attn.c_attn.weight"
  std::vector<uint64_t> shape;  // (C, 3C): Conv1D's (in, out)
  bool conv1d = false;
};
HfTensorName hf_gpt2_tensor_name(const GPT2Config& cfg, const ParamTensor& t);

// config.json's text -> the shape (finalized). path names the file in errors.
GPT2Config parse_hf_gpt2_config(std::string_view text, const std::string& path);

// What a directory holds: its shape and the files a read opens (config.json, the index, each
// weight file), checked as far as that can be done without reading a tensor's header.
struct HfGpt2Dir {
  GPT2Config cfg;
  std::vector<std::string> files;         // every file read, config.json first
  std::vector<std::string> weight_files;  // model.safetensors, or the shards in name order
};
HfGpt2Dir inspect_hf_gpt2(const std::string& dir);

// Streams every parameter into ringzero's internal layout, a tensor at a time (sink as
// read_model_file_chunks's, model/llmc_file.h), after checking every weight file's header
// against config.json. Returns the directory's description.
HfGpt2Dir read_hf_gpt2(const std::string& dir, const ParamChunkSink& sink);

// Writes config.json and model.safetensors into dir, the tensors in `dtype` (fp32: F32, bf16:
// BF16, rounded to nearest even), from params_internal (num_parameters(cfg) floats, internal
// layout). dir must not exist, or be an empty directory; with overwrite an existing one's
// model files are replaced (config.json, model.safetensors, and a model.safetensors.index.json
// with the shards it names, which would otherwise shadow or contradict the new file); other
// files in it (a tokenizer's) are left alone.
void write_hf_gpt2(const std::string& dir, const GPT2Config& cfg, Precision dtype, const float* params_internal,
                   bool overwrite);

}  // namespace rz
