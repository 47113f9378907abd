// Fuzz target: safetensors files (model/safetensors.cpp), as hf:DIR imports open them: the
// header checked, then every tensor read back (floats widened, others as bytes).
#include <vector>

#include "fuzz/fuzz_util.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = rz::fuzz::write_input(data, size, "model.safetensors");
  try {
    rz::SafetensorsFile f(path);
    std::vector<unsigned char> bytes;
    std::vector<float> floats;
    for (const rz::SafeTensorInfo& t : f.tensors()) {
      // The tiling check bounds every tensor by the file's size, so these allocations are too.
      bytes.resize(t.end - t.begin);
      f.read_bytes(t, 0, bytes.size(), bytes.data());
      if (!rz::safe_dtype_is_float(t.dtype)) continue;
      floats.resize(t.numel);
      f.read_f32(t, 0, floats.size(), floats.data());
    }
    if (f.find("\x01no such tensor") != nullptr) std::abort();
  } catch (const rz::Error&) {
  }
  return 0;
}
