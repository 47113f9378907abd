// Tests of base/: the memory tracker's accounting and bf16 rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/bf16.h"
#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"

#include <unistd.h>

using namespace rz;

TEST_CASE("tracker counts current and peak bytes per tag") {
  auto& mt = MemoryTracker::global();
  size_t base_grads = mt.current(MemTag::grads);
  mt.reset_peaks();
  {
    Buffer<float> a(MemTag::grads, 1000);
    REQUIRE(mt.current(MemTag::grads) == base_grads + 4000);
    {
      Buffer<float> b(MemTag::grads, 500);
      REQUIRE(mt.current(MemTag::grads) == base_grads + 6000);
    }
    REQUIRE(mt.current(MemTag::grads) == base_grads + 4000);
    REQUIRE(a[999] == 0.0f);  // zero-initialised
  }
  REQUIRE(mt.current(MemTag::grads) == base_grads);
  REQUIRE(mt.peak(MemTag::grads) == base_grads + 6000);
  mt.reset_peaks();
  REQUIRE(mt.peak(MemTag::grads) == base_grads);
}

TEST_CASE("moving a buffer moves its accounting") {
  auto& mt = MemoryTracker::global();
  size_t before = mt.current(MemTag::workspace);
  Buffer<int> a(MemTag::workspace, 10);
  Buffer<int> b = std::move(a);
  REQUIRE(a.data() == nullptr);
  REQUIRE(b.size() == 10);
  REQUIRE(mt.current(MemTag::workspace) == before + 40);
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN") {
  REQUIRE(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  REQUIRE(bf16_to_float(float_to_bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  REQUIRE(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 and 1 + 2^-6: ties go to even (1 + 2^-6).
  REQUIRE(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) ==
          1.0f + std::ldexp(1.0f, -6));
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  REQUIRE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST_CASE("RZ_CHECK throws rz::Error with the formatted message") {
  try {
    RZ_CHECK(1 + 1 == 3, "bad value %d for --%s", 7, "steps");
    FAIL("no throw");
  } catch (const Error& e) {
    REQUIRE(std::string(e.what()) == "bad value 7 for --steps");
  }
}

TEST_CASE("AtomicFile appears whole on commit and leaves nothing behind otherwise") {
  char dir[] = "/tmp/rz_atomic_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/f.bin";
  auto read_all = [](const std::string& p) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) return std::string("<missing>");
    std::string s;
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  write_file_atomic(path, "old contents");
  {
    AtomicFile f(path);
    f.write("new", 3);
    REQUIRE(read_all(path) == "old contents");  // nothing visible before commit
    REQUIRE(read_all(f.temp_path()) == "new");
  }  // destroyed uncommitted: the temporary is gone, the old file stays
  REQUIRE(read_all(path) == "old contents");
  REQUIRE(read_all(path + ".tmp." + std::to_string(getpid())) == "<missing>");
  {
    AtomicFile f(path);
    f.write("xxxxBODY", 8);
    f.seek(0);
    f.write("HEAD", 4);
    f.commit();
  }
  REQUIRE(read_all(path) == "HEADBODY");
  REQUIRE_THROWS_WITH(write_file_atomic(std::string(dir) + "/no/such/dir/f", "x"),
                      Catch::Contains("no/such/dir/f"));
}
