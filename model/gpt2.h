// model/gpt2.h: the model's name before it had a second family.
//
// The model (model/model.h) is one class for every family; GPT2 is kept as its name for the
// strategies, the trainer and the subcommands, which issue 41 is reworking: renaming them
// there now would collide with that work. New code says Model and includes model/model.h.
#pragma once

#include "model/model.h"

namespace rz {
using GPT2 = Model;
}  // namespace rz
