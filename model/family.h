// model/family.h: what distinguishes one decoder-only transformer family from another, as
// one row of a table.
//
// ringzero's model (model/model.h) is one pre-norm decoder block repeated L times:
//   x -> norm1 -> qkv matmul -> [positions] -> causal attention -> attproj -> + x
//     -> norm2 -> fc matmul -> MLP activation -> fcproj -> + (the residual)
// then a final norm and the classifier. GPT-2 and the Llama family (Llama 2/3, SmolLM2,
// TinyLlama, nanochat's and the speedrun models' blocks) differ only in the choices below,
// so a family is a row of kFamilyTraits, and the layout (model/layout.h), the forward and
// backward (model/model.cpp), the memory planner and the file formats ask the row instead
// of testing which family it is (STYLE.md habit 20). A third family whose block is made of
// these parts (Qwen2: Llama with q/k/v biases) is a new row and a new Hugging Face name
// table, not a new model.
//
// The shape that goes with a family (kv heads, the MLP's width, rope theta, the norm's
// epsilon, a tied or untied classifier) is the config's (model/config.h).
#pragma once

#include <string>
#include <vector>

namespace rz {

enum class ModelFamily : int { gpt2, llama };
inline constexpr ModelFamily kModelFamilies[] = {ModelFamily::gpt2, ModelFamily::llama};
const char* family_name(ModelFamily f);  // "gpt2", "llama"
std::vector<std::string> family_names();  // of kModelFamilies, in order
// Throws "family: expected gpt2 or llama, found 'NAME'".
ModelFamily parse_family(const std::string& name);

// The block's normalisation: LayerNorm (weight and bias; epsilon 1e-5, fixed in the op, as
// GPT-2's) or RMSNorm (weight only; epsilon from the config).
enum class NormKind : int { layernorm, rmsnorm };
// Where positions enter: a learned table wpe (maxT, C) added to the token embedding, or
// rotary embeddings applied to q and k inside attention (half-split form, LLAMA_OPS.md).
enum class PositionKind : int { learned, rope };
// The MLP: fc (4C) -> GELU (tanh) -> fcproj, or the gated form, fc (2H: gate | up) ->
// silu(gate) * up (H) -> fcproj.
enum class MlpKind : int { gelu, swiglu };

struct FamilyTraits {
  ModelFamily family;
  NormKind norm;
  PositionKind position;
  MlpKind mlp;
  bool qkv_bias;       // the qkv matmul has a bias
  bool proj_bias;      // attproj and fcproj have biases
  bool fc_bias;        // the MLP's first matmul has one
  bool grouped_kv;     // kv heads may be fewer than query heads (GQA, MQA)
  bool untied_ok;      // the classifier may be a tensor of its own (lm_head)
};
const FamilyTraits& family_traits(ModelFamily f);

}  // namespace rz
