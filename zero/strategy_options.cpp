// zero/strategy_options.cpp: the strategies' names, parsed and printed, and the refusal of
// a strategy on ranks its traits exclude (kept apart from the strategies themselves, so a
// parser of outside text -- the train config and its fuzz target -- needs nothing else of zero/).
#include "zero/strategy_options.h"

#include "base/check.h"

namespace rz {

std::vector<std::string> strategy_names() { return enum_names(kStrategyKinds, strategy_name); }

StrategyKind parse_strategy(const std::string& name) {
  return parse_enum(name, kStrategyKinds, strategy_name, "strategy");
}

void check_strategy_device(StrategyKind k, bool on_gpu, const std::string& where) {
  if (!on_gpu || strategy_traits(k).runs_on_gpu_ranks) return;
  std::vector<std::string> gpu;
  for (const StrategyTraits& t : kStrategyTraits)
    if (t.runs_on_gpu_ranks) gpu.emplace_back(t.name);
  fail(strfmt("%s: %s runs on CPU ranks only in this build (GPU ranks: %s)", where.c_str(), strategy_name(k),
              or_list(gpu).c_str()));
}

}  // namespace rz
