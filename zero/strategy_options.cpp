// zero/strategy_options.cpp: the strategies' names, parsed and printed (kept apart from
// the strategies themselves, so a parser of outside text -- the train config and its
// fuzz target -- needs nothing else of zero/).
#include "zero/strategy_options.h"

#include "base/check.h"

namespace rz {

const char* strategy_name(StrategyKind k) {
  switch (k) {
    case StrategyKind::ddp: return "ddp";
    case StrategyKind::zero1: return "zero1";
    case StrategyKind::zero2: return "zero2";
    case StrategyKind::zero3: return "zero3";
  }
  return "?";
}

std::vector<std::string> strategy_names() { return enum_names(kStrategyKinds, strategy_name); }

StrategyKind parse_strategy(const std::string& name) {
  return parse_enum(name, kStrategyKinds, strategy_name, "strategy");
}

}  // namespace rz
