// tests/test_paths.h: where this build's ringzero binary and this checkout's source tree
// are, for the tests that run the binary or read the repository's files. The two strings
// live in one file CMake writes into the build folder (tests/CMakeLists.txt), not in -D
// flags on every test, so a test's source compiles to the same object in every checkout:
// ccache then serves a clean clone (CI's) from another clone's objects.
#pragma once

namespace rz::test {
extern const char* const kRingzeroBinary;  // the ringzero this build makes
extern const char* const kSourceDir;       // the checkout (configs/, data/)
}  // namespace rz::test

#define RINGZERO_BINARY (::rz::test::kRingzeroBinary)
#define RINGZERO_SOURCE_DIR (::rz::test::kSourceDir)
