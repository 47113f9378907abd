// model/reference_state.h: a reference batch for `ringzero verify` in a safetensors file,
// named as a Hugging Face model names its parameters -- the llama family's counterpart of
// llm.c's debug-state file (model/llmc_file.h), which holds GPT-2 only.
//
// The file (tests/fixtures/hf_llama_tiny/make_fixture.py writes one with transformers):
//   inputs, targets   (B, T) token ids, stored as F32 (exact: ids are below 2^24)
//   logits            (B, T, V) the reference's logits for inputs
//   loss              (1) the mean cross-entropy of targets over the B*T positions
//   grad.<name>       d loss / d parameter for every tensor of the model's Hugging Face file,
//                     by its name there ("grad.model.layers.0.self_attn.q_proj.weight")
// Read through model/safetensors.h (untrusted: bounded, offsets checked), every tensor's shape
// checked against the model's, token ids checked to be integers inside [0, V).
#pragma once

#include <string>

#include "model/config.h"
#include "model/llmc_file.h"

namespace rz {

// The batch, logits, loss and gradients (internal layout, the vocabulary's padding rows zero)
// for a model of shape cfg. Throws one line naming the file and the tensor.
DebugState read_reference_state(const std::string& path, const ModelConfig& cfg);

}  // namespace rz
