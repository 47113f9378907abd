// Fuzz target: llm.c model files (model/llmc_file.cpp), as --init, sample and resume read them.
#include "fuzz/fuzz_util.h"
#include "model/layout.h"
#include "model/llmc_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = rz::fuzz::write_input(data, size, "model.bin");
  try {
    rz::ModelFile h = rz::read_model_header(path);
    rz::ModelFile m = rz::read_model_file(path);
    if (m.params.size() != rz::num_parameters(h.cfg)) std::abort();
  } catch (const rz::Error&) {
  }
  return 0;
}
