// model/hf_llama.h: Hugging Face Llama directories (transformers' LlamaForCausalLM), read and
// written; also the llama family's model file inside ringzero's checkpoints.
//
// config.json gives the shape: hidden_size (C), num_hidden_layers (L), num_attention_heads
// (NH), num_key_value_heads (NKV; absent: NH), intermediate_size (H), vocab_size (V),
// max_position_embeddings (maxT), rms_norm_eps, rope_theta (or, as transformers 5 writes it,
// rope_parameters {rope_theta, rope_type "default"}), tie_word_embeddings (absent: false, as
// LlamaConfig's default). It must describe what ringzero computes: model_type llama,
// architecture LlamaForCausalLM, hidden_act silu, no attention_bias and no mlp_bias, no rope
// scaling (rope_scaling null, rope_type default: Llama 3.1's "llama3" and other scalings are
// refused by name), head_dim absent or C/NH, pretraining_tp 1. Absent keys take LlamaConfig's
// defaults, as from_pretrained does.
//
// Names (model.layers.N.*) and ringzero's tensors: embed_tokens -> wte (V rows of Vp; the
// padding rows zero on import, dropped on export), lm_head -> lmhead (untied; tied: absent
// from the file, or equal to embed_tokens), model.norm -> lnfw, input_layernorm -> ln1w,
// post_attention_layernorm -> ln2w, self_attn.{q,k,v}_proj -> the row blocks [0, C),
// [C, C + NKV hs), [C + NKV hs, C + 2 NKV hs) of qkvw (one fused matmul), o_proj ->
// attprojw, mlp.{gate,up}_proj -> the row blocks [0, H), [H, 2H) of fcw (SwiGLU's gate | up),
// down_proj -> fcprojw. Every weight is nn.Linear's (out, in), as ringzero's: nothing is
// transposed. The rotary layout: transformers keeps q_proj and k_proj in the half-split form
// its rotate_half rotates (dimension i pairs with i + hs/2 in each head; conversions from
// Meta's checkpoints permute the rows into it), and that is the form of ringzero's rope op
// (kernels/backend.h rope_forward): the rows load as they are
// (tests/test_model_llama.cpp holds a transformers fixture to it).
//
// Writing gives what save_pretrained gives: config.json, and model.safetensors (F32 or BF16)
// with metadata format "pt", lm_head present only when untied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/hf_dir.h"
#include "model/layout.h"
#include "model/llmc_file.h"

namespace rz {

// One Hugging Face tensor of a layout tensor: its name, its shape, and the rows of the
// ringzero tensor it holds (ringzero's rows first_row .. first_row + shape[0] - 1; a vector
// is one row of its length).
struct HfPiece {
  std::string name;             // "model.layers.3.self_attn.k_proj.weight"
  std::vector<uint64_t> shape;  // (NKV hs, C)
  size_t first_row = 0;
};
std::vector<HfPiece> hf_llama_pieces(const ModelConfig& cfg, const ParamTensor& t);

// config.json's text -> the shape (finalized, family llama). path names the file in errors.
ModelConfig parse_hf_llama_config(std::string_view text, const std::string& path);

// Streams every parameter into ringzero's internal layout, a tensor at a time (as
// read_model_file_chunks, model/llmc_file.h), after checking every weight file's header
// against config.json: a missing tensor, an unknown one, a shape that disagrees or a dtype
// other than F32, F16 or BF16 is refused naming the file and the tensor. `files` comes from
// list_hf_dir(dir). Returns the shape.
ModelConfig read_hf_llama(const std::string& dir, const HfDirFiles& files, const ParamChunkSink& sink);

// The llama family's files in a directory written a chunk at a time, with no full-size
// array: write(begin, data, n) takes internal-layout elements [begin, begin + n) in any order
// and puts each piece's rows at their place in model.safetensors (seek + write; bf16 rounded
// through a small buffer; the padding rows are not written). commit() checks that every
// parameter came once, renames model.safetensors into place and then writes config.json
// (atomic each: a directory with config.json is whole). `dir` must exist.
class HfLlamaWriter {
 public:
  HfLlamaWriter(const std::string& dir, const ModelConfig& cfg, Precision dtype);
  ~HfLlamaWriter();
  HfLlamaWriter(const HfLlamaWriter&) = delete;
  HfLlamaWriter& operator=(const HfLlamaWriter&) = delete;
  void write(size_t begin, const float* data, size_t n);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// config.json's text for cfg (what commit writes).
std::string hf_llama_config_text(const ModelConfig& cfg, Precision dtype);

}  // namespace rz
