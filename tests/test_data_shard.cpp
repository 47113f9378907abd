// Tests of data/shard: llm.c token shards round trip, and every malformed shard is a one-line
// error naming the file.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "base/check.h"
#include "data/shard.h"
#include "data_test_util.h"

using namespace rz;
using rz::testing::ScratchDir;

namespace {

std::string error_of(const std::string& path) {
  try {
    ShardReader r(path);
  } catch (const rz::Error& e) {
    return e.what();
  }
  return "";
}

std::string header_bytes(int32_t magic, int32_t version, int32_t count) {
  int32_t h[256] = {};
  h[0] = magic;
  h[1] = version;
  h[2] = count;
  return std::string(reinterpret_cast<const char*>(h), sizeof(h));
}

}  // namespace

TEST_CASE("a shard round-trips and has llm.c's exact layout") {
  ScratchDir dir;
  std::vector<int> tokens;
  for (int i = 0; i < 3000; i++) tokens.push_back((i * 7919) % 65536);
  tokens.push_back(65535);
  std::string path = dir.file("train_000000.bin");
  write_shard(path, tokens.data(), tokens.size());

  // Byte by byte: header (magic, version, count), then little-endian uint16s.
  std::string bytes = rz::testing::read_bytes(path);
  REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
  REQUIRE(bytes.substr(0, 1024) == header_bytes(20240520, 1, static_cast<int32_t>(tokens.size())));
  REQUIRE(static_cast<unsigned char>(bytes[1024 + 2]) == 7919 % 256);
  REQUIRE(static_cast<unsigned char>(bytes[1024 + 3]) == 7919 / 256);

  ShardReader r(path);
  REQUIRE(r.count() == tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) REQUIRE(r.tokens()[i] == tokens[i]);
  // The writer leaves no temporary file behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  REQUIRE(files == 1);
}

TEST_CASE("an empty shard is valid") {
  ScratchDir dir;
  write_shard(dir.file("e.bin"), nullptr, 0);
  ShardReader r(dir.file("e.bin"));
  REQUIRE(r.count() == 0);
}

TEST_CASE("an unfinished ShardWriter leaves nothing under the final name") {
  ScratchDir dir;
  {
    ShardWriter w(dir.file("s.bin"));
    int t[3] = {1, 2, 3};
    w.append(t, 3);
  }
  REQUIRE(std::filesystem::is_empty(dir.path));
}

TEST_CASE("a token id that does not fit uint16 is refused by the writer") {
  ScratchDir dir;
  int t[2] = {5, 70000};
  REQUIRE_THROWS_WITH(write_shard(dir.file("s.bin"), t, 2), Catch::Contains("70000"));
}

TEST_CASE("malformed shards give one-line errors naming the file") {
  ScratchDir dir;
  std::string good = header_bytes(20240520, 1, 4) + std::string(8, '\x01');

  std::string p = dir.file("missing.bin");
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("cannot open"));

  p = dir.file("short_header.bin");
  rz::testing::write_bytes(p, good.substr(0, 100));
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("shorter than the 1024-byte"));

  p = dir.file("truncated.bin");
  rz::testing::write_bytes(p, good.substr(0, good.size() - 3));
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("header says 4 tokens"));

  p = dir.file("too_long.bin");
  rz::testing::write_bytes(p, good + "xx");
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("1032 bytes"));

  p = dir.file("magic.bin");
  rz::testing::write_bytes(p, header_bytes(20240328, 1, 4) + std::string(8, '\0'));
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("bad magic 20240328"));

  p = dir.file("version.bin");
  rz::testing::write_bytes(p, header_bytes(20240520, 2, 4) + std::string(8, '\0'));
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("version 2"));

  p = dir.file("negative.bin");
  rz::testing::write_bytes(p, header_bytes(20240520, 1, -5) + std::string(8, '\0'));
  CHECK_THAT(error_of(p), Catch::Contains(p) && Catch::Contains("-5 tokens"));

  for (const char* name : {"short_header.bin", "truncated.bin", "magic.bin"})
    CHECK(error_of(dir.file(name)).find('\n') == std::string::npos);
  CHECK(error_of(dir.path).find("not a regular file") != std::string::npos);
}

TEST_CASE("write_file_atomic replaces the file whole") {
  ScratchDir dir;
  std::string p = dir.file("meta.json");
  write_file_atomic(p, "first");
  write_file_atomic(p, "second version");
  REQUIRE(rz::testing::read_bytes(p) == "second version");
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  REQUIRE(files == 1);
}
