// model/config.h: the model's shape (family and sizes), presets, precision and activation
// recompute modes.
//
// Legend used across model/ and kernels/: B batch, T time (sequence), C channels,
// L layers, NH (query) heads, NKV key/value heads, hs head size (C / NH), H the MLP's
// hidden width (4C for GPT-2, the gated MLP's intermediate size for Llama), V vocab, Vp
// padded vocab (V rounded up to a multiple of 64), maxT the longest sequence (rows of wpe
// for GPT-2; the longest context for rotary families).
#pragma once

#include <string>
#include <vector>

#include "model/family.h"

namespace rz {

// Fields that a family does not use hold their neutral value after finalize_config (GPT-2:
// kv heads = heads, H = 4C, rope_theta 0, norm_eps 1e-5 (its layernorm's), tied).
struct ModelConfig {
  ModelFamily family = ModelFamily::gpt2;
  int max_seq_len = 1024;         // maxT
  int vocab_size = 50257;         // V
  int padded_vocab_size = 50304;  // Vp = round_up(V, 64)
  int num_layers = 12;            // L
  int num_heads = 12;             // NH
  int num_kv_heads = 0;           // NKV (0: NH); NH % NKV == 0
  int channels = 768;             // C
  int intermediate = 0;           // H (0: the family's default: 4C, or Llama's about 8C/3)
  double rope_theta = 0;          // rotary base (0: 10000 for rope families; GPT-2 has none)
  double norm_eps = 0;            // RMSNorm epsilon (0: 1e-5)
  bool tied = true;               // the classifier is wte (else a tensor lm_head (Vp, C) of its own)

  int head_size() const { return channels / num_heads; }                     // hs
  int qkv_width() const { return (num_heads + 2 * num_kv_heads) * head_size(); }  // q | k | v per row
  // Columns of the MLP's first matmul: H (GELU), or 2H (SwiGLU's gate and up, fused).
  int fc_width() const { return family_traits(family).mlp == MlpKind::swiglu ? 2 * intermediate : intermediate; }
};
// The name every caller used before the Llama family: kept while issue 41 reworks zero/,
// train/ and cli/ (a rename there now would collide with that work).
using GPT2Config = ModelConfig;

// Presets. GPT-2: tiny (tests), d2, d4, d6, d12 (GPT-2 124M), d24, d36, d48; their vocab
// and maxT are GPT-2's (50257, 1024) unless overridden; tiny is small everywhere. Llama:
// llama-tiny (tests), llama-d4, llama-d6, llama-d12 (GPT-2's dN sizes with 2 query heads per
// kv head and an MLP of GPT-2's parameter count), smollm2-135m (SmolLM2-135M's shape).
// Throws rz::Error naming the unknown preset.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// "A preset plus overrides", as train's model keys and the subcommands' --layers, --channels,
// ... give a shape: each field above 0 takes the place of the base shape's. A family other
// than the base's keeps L, C, NH, V and maxT and takes the new family's defaults for the
// rest.
struct ShapeOverrides {
  int layers = 0;    // L
  int channels = 0;  // C
  int heads = 0;     // NH
  int vocab = 0;     // V
  int max_seq = 0;   // maxT
  std::string family = "";       // "gpt2", "llama"; "" or "auto": the base's
  int kv_heads = 0;              // NKV
  int intermediate = 0;          // H
  double rope_theta = 0;
  double norm_eps = 0;
  std::string classifier = "";   // "tied", "untied"; "" or "auto": the base's
};
// `base` (a preset, or a config's shape) with o's fields above 0 in place; not finalized.
ModelConfig override_shape(ModelConfig base, const ShapeOverrides& o);

// Fills the derived fields (Vp from V; the family's defaults for NKV, H, rope_theta,
// norm_eps) and checks the shape against the family (C % NH == 0, NH % NKV == 0, an even
// head size for rotary families, sizes positive and not absurd, no field the family does
// not have). Throws rz::Error naming the bad field.
void finalize_config(ModelConfig& cfg);

// Llama's default MLP width for C channels: 8C/3 (so the gated MLP's three matrices hold
// GPT-2's 8C^2 parameters), rounded up to a multiple of 64.
int default_intermediate(int channels);

// "L4 C128 NH4 V257 maxT128", and for rotary families also "NKV2 H384 theta 10000 untied".
std::string describe_shape(const ModelConfig& cfg);

enum class Precision : int { fp32, bf16 };
inline constexpr Precision kPrecisions[] = {Precision::fp32, Precision::bf16};
const char* precision_name(Precision p);
std::vector<std::string> precision_names();  // of kPrecisions, in order
// Throws "precision: expected fp32 or bf16, found 'NAME'".
Precision parse_precision(const std::string& name);
inline size_t precision_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

// What the forward keeps for backward and what backward computes again instead.
//   none   every layer's activations are kept (llm.c's layout).
//   gelu   no layer keeps its MLP activation's output (GELU's N x 4C, SwiGLU's N x H);
//          backward recomputes it from fch.
//   layer  each layer keeps only its input (the residual stream entering it, N x C); backward
//          recomputes the block's forward into one block's worth of scratch just before
//          that block's backward.
// Gradients are bitwise the same in every mode (the recompute runs the same ops on the
// same inputs).
enum class Recompute : int { none, gelu, layer };
inline constexpr Recompute kRecomputes[] = {Recompute::none, Recompute::gelu, Recompute::layer};
const char* recompute_name(Recompute r);
std::vector<std::string> recompute_names();  // of kRecomputes, in order
// Throws "recompute: expected none, gelu or layer, found 'NAME'".
Recompute parse_recompute(const std::string& name);

// How attention keeps what its backward needs.
//   materialized  the softmax probabilities, (B, NH, T, T) per layer (llm.c's layout).
//   flash         each row's log-sum-exp, (B, NH, T) floats per layer; backward recomputes
//                 the probabilities from it (kernels/backend.h attention_*_flash). The
//                 forward's output is the same; gradients differ by rounding only.
enum class Attention : int { materialized, flash };
inline constexpr Attention kAttentions[] = {Attention::materialized, Attention::flash};
const char* attention_name(Attention a);
std::vector<std::string> attention_names();  // of kAttentions, in order
// Throws "attention: expected materialized or flash, found 'NAME'".
Attention parse_attention(const std::string& name);

}  // namespace rz
