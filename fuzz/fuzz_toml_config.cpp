// Fuzz target: TOML run configs (train/config_toml.cpp reads the file, train/config.cpp
// its keys): load, validate, print the table.
#include "fuzz/fuzz_util.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = rz::fuzz::write_input(data, size, "config.toml");
  try {
    rz::TrainConfig cfg;
    rz::load_config_toml(cfg, path);
    (void)rz::format_config_table(cfg);
    rz::validate_config(cfg);
  } catch (const rz::Error&) {
  }
  return 0;
}
