// model/family.cpp: the family rows (see family.h).
#include "model/family.h"

#include "base/check.h"

namespace rz {

namespace {
// clang-format off
constexpr FamilyTraits kFamilyTraits[] = {
  // family            norm                 positions             MLP             qkv_b  proj_b fc_b   GQA    untied
  {ModelFamily::gpt2,  NormKind::layernorm, PositionKind::learned, MlpKind::gelu,   true,  true,  true,  false, false},
  {ModelFamily::llama, NormKind::rmsnorm,   PositionKind::rope,    MlpKind::swiglu, false, false, false, true,  true},
};
// clang-format on
}  // namespace

const char* family_name(ModelFamily f) { return f == ModelFamily::llama ? "llama" : "gpt2"; }

std::vector<std::string> family_names() { return enum_names(kModelFamilies, family_name); }

ModelFamily parse_family(const std::string& name) { return parse_enum(name, kModelFamilies, family_name, "family"); }

const FamilyTraits& family_traits(ModelFamily f) {
  for (const FamilyTraits& t : kFamilyTraits)
    if (t.family == f) return t;
  RZ_FAIL("family_traits: no row for family %d", static_cast<int>(f));
}

}  // namespace rz
