// model/config.h: GPT-2 shape, presets, precision and activation recompute modes.
//
// Legend used across model/ and kernels/: B batch, T time (sequence), C channels,
// L layers, NH heads, V vocab, Vp padded vocab (V rounded up to a multiple of 64),
// maxT the longest sequence (rows of wpe).
#pragma once

#include <string>
#include <vector>

namespace rz {

struct GPT2Config {
  int max_seq_len = 1024;         // maxT
  int vocab_size = 50257;         // V
  int padded_vocab_size = 50304;  // Vp = round_up(V, 64)
  int num_layers = 12;            // L
  int num_heads = 12;             // NH
  int channels = 768;             // C
};

// Presets: tiny (tests), d2, d4, d6, d12 (GPT-2 124M), d24, d36, d48. Vocab and maxT of a
// preset are GPT-2's (50257, 1024) unless overridden; tiny is small everywhere.
// Throws rz::Error naming the unknown preset.
GPT2Config model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// "A preset plus overrides", as train's model keys and the subcommands' --layers, --channels,
// ... give a shape: each field above 0 takes the place of the base shape's.
struct ShapeOverrides {
  int layers = 0;    // L
  int channels = 0;  // C
  int heads = 0;     // NH
  int vocab = 0;     // V
  int max_seq = 0;   // maxT
};
// `base` (a preset, or a config's shape) with o's fields above 0 in place; not finalized.
GPT2Config override_shape(GPT2Config base, const ShapeOverrides& o);

// Fills padded_vocab_size from vocab_size and checks the shape (C % NH == 0, sizes
// positive and not absurd). Throws rz::Error naming the bad field.
void finalize_config(GPT2Config& cfg);

enum class Precision : int { fp32, bf16 };
inline constexpr Precision kPrecisions[] = {Precision::fp32, Precision::bf16};
const char* precision_name(Precision p);
std::vector<std::string> precision_names();  // of kPrecisions, in order
// Throws "precision: expected fp32 or bf16, found 'NAME'".
Precision parse_precision(const std::string& name);
inline size_t precision_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

// What the forward keeps for backward and what backward computes again instead.
//   none   every layer's activations are kept (llm.c's layout).
//   gelu   no layer keeps its MLP GELU output (N x 4C); backward recomputes it from fch.
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
