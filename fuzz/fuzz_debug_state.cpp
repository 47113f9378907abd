// Fuzz target: llm.c debug-state files (model/llmc_file.cpp), as `ringzero verify` reads them.
// The model is fixed (tiny), as verify's is: it comes from the model file beside the state.
#include "fuzz/fuzz_util.h"
#include "model/llmc_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const rz::GPT2Config cfg = [] {
    rz::GPT2Config c;
    c.num_layers = 1;
    c.channels = 8;
    c.num_heads = 2;
    c.vocab_size = 11;
    c.max_seq_len = 4;
    rz::finalize_config(c);
    return c;
  }();
  const std::string path = rz::fuzz::write_input(data, size, "state.bin");
  try {
    rz::DebugState s = rz::read_debug_state(path, cfg);
    if (s.x.size() != static_cast<size_t>(s.B) * s.T) std::abort();
  } catch (const rz::Error&) {
  }
  return 0;
}
