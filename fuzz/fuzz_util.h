// fuzz/fuzz_util.h: what every fuzz target shares.
//
// The parsers take paths, so each input is written to a file in a private scratch
// directory (one per fuzzing process) and the parser is pointed at it. A parser may refuse
// an input only with rz::Error (a one-line message); anything else a sanitizer or libFuzzer
// sees (a crash, a leak, an allocation past -rss_limit_mb / -malloc_limit_mb, a timeout)
// is a finding.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "base/check.h"

namespace rz::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/rz_fuzz_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    std::string s(d);
    static struct Cleanup {
      std::string dir;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    } cleanup{s};
    return s;
  }();
  return dir;
}

// Writes the input to <scratch>/<name> and returns the path.
inline std::string write_input(const uint8_t* data, size_t size, const char* name) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace rz::fuzz
