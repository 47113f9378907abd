// Fuzz target: llm.c's multiple-choice eval files (data/eval_file.cpp), as eval --hellaswag
// and train --hellaswag read them.
#include "data/eval_file.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = rz::fuzz::write_input(data, size, "eval.bin");
  try {
    const rz::EvalFile f = rz::read_eval_file(path);
    // What the reader promises the scorer: a label among the completions, no empty token list.
    for (const rz::EvalExample& e : f.examples) {
      if (e.label < 0 || e.label >= static_cast<int>(e.completions.size()) || e.context.empty()) std::abort();
      for (const auto& c : e.completions)
        if (c.empty()) std::abort();
    }
    if (f.longest_row() < 1) std::abort();
  } catch (const rz::Error&) {
  }
  return 0;
}
