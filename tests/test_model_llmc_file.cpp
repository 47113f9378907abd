// llm.c model and debug-state files: bitwise round trips, order conversion, bad files.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "model/llmc_file.h"
#include "model/layout.h"

using namespace rz;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("rz_ckpt_test_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

std::vector<float> random_params(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> p(n);
  for (float& x : p) x = d(g);
  return p;
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

void set_header(std::vector<char>& bytes, int index, int32_t value) {
  std::memcpy(bytes.data() + 4 * index, &value, 4);
}

}  // namespace

TEST_CASE("model file: fp32 write -> read is bitwise, header as llm.c writes it", "[checkpoint]") {
  TempDir dir;
  const GPT2Config cfg = model_preset("tiny");
  const size_t n = num_parameters(cfg);
  std::vector<float> p = random_params(n, 1);
  write_model_file(dir.file("m.bin"), cfg, Precision::fp32, p.data());
  std::vector<char> raw = slurp(dir.file("m.bin"));
  REQUIRE(raw.size() == 1024 + 4 * n);
  int32_t h[8];
  std::memcpy(h, raw.data(), sizeof(h));
  CHECK(h[0] == 20240326);
  CHECK(h[1] == 3);
  CHECK(h[2] == 64);   // maxT
  CHECK(h[3] == 257);  // V
  CHECK(h[4] == 2);    // L
  CHECK(h[5] == 4);    // NH
  CHECK(h[6] == 64);   // C
  CHECK(h[7] == 320);  // Vp
  // llm.c order: the file's first tensor is wte, the second wpe
  const ParamLayout lay = build_param_layout(cfg);
  CHECK(std::memcmp(raw.data() + 1024, p.data() + lay.find(ParamKind::wte).offset, 4 * 320 * 64) == 0);
  CHECK(std::memcmp(raw.data() + 1024 + 4 * 320 * 64, p.data() + lay.find(ParamKind::wpe).offset, 4 * 64 * 64) == 0);
  ModelFile mf = read_model_file(dir.file("m.bin"));
  CHECK(mf.precision == Precision::fp32);
  CHECK(mf.cfg.channels == 64);
  CHECK(mf.cfg.padded_vocab_size == 320);
  REQUIRE(mf.params.size() == n);
  CHECK(std::memcmp(mf.params.data(), p.data(), 4 * n) == 0);
  // no temporary file is left behind
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
}

TEST_CASE("model file: bf16 (version 5) round trip is bitwise after rounding", "[checkpoint]") {
  TempDir dir;
  const GPT2Config cfg = model_preset("tiny");
  const size_t n = num_parameters(cfg);
  std::vector<float> p = random_params(n, 2);
  write_model_file(dir.file("a.bin"), cfg, Precision::bf16, p.data());
  ModelFile mf = read_model_file(dir.file("a.bin"));
  CHECK(mf.precision == Precision::bf16);
  REQUIRE(slurp(dir.file("a.bin")).size() == 1024 + 2 * n);
  for (size_t i = 0; i < n; ++i) REQUIRE(mf.params[i] == bf16_to_float(float_to_bf16(p[i])));
  write_model_file(dir.file("b.bin"), cfg, Precision::bf16, mf.params.data());
  CHECK(slurp(dir.file("a.bin")) == slurp(dir.file("b.bin")));
}

TEST_CASE("model file read in chunks (--init) gives read_model_file's params, fp32 and bf16", "[checkpoint]") {
  TempDir dir;
  const GPT2Config cfg = model_preset("tiny");
  const size_t n = num_parameters(cfg);
  const std::vector<float> p = random_params(n, 3);
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    write_model_file(dir.file("c.bin"), cfg, prec, p.data());
    const ModelFile whole = read_model_file(dir.file("c.bin"));
    std::vector<float> got(n, std::numeric_limits<float>::quiet_NaN());
    std::vector<int> seen(n, 0);
    size_t largest = 0;
    const ModelFile head = read_model_file_chunks(dir.file("c.bin"), [&](size_t begin, const float* d, size_t k) {
      REQUIRE(begin + k <= n);
      largest = std::max(largest, k);
      for (size_t i = 0; i < k; ++i) {
        got[begin + i] = d[i];
        ++seen[begin + i];
      }
    });
    CHECK(head.precision == prec);
    CHECK(head.params.empty());
    CHECK(largest <= (size_t{1} << 16));
    for (size_t i = 0; i < n; ++i) REQUIRE((seen[i] == 1 && got[i] == whole.params[i]));
  }
  // A file cut short is refused before any chunk is handed out.
  const std::vector<char> bytes = slurp(dir.file("c.bin"));
  std::ofstream(dir.file("short.bin"), std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() - 2));
  int chunks = 0;
  CHECK_THROWS_WITH(read_model_file_chunks(dir.file("short.bin"), [&](size_t, const float*, size_t) { ++chunks; }),
                    Catch::Contains("short.bin") && Catch::Contains("bytes"));
  CHECK(chunks == 0);
}

TEST_CASE("model file written in chunks, in any order, has the one-shot writer's bytes", "[checkpoint]") {
  TempDir dir;
  const GPT2Config cfg = model_preset("tiny");
  const size_t n = num_parameters(cfg);
  const std::vector<float> p = random_params(n, 3);
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    INFO(precision_name(prec));
    // The expected bytes, independently: llm.c's header, then llm.c's order (rounded in bf16).
    std::vector<float> llmc(n);
    internal_to_llmc(cfg, p.data(), llmc.data());
    std::vector<char> want(1024, 0);
    const int32_t h[8] = {20240326, prec == Precision::fp32 ? 3 : 5, 64, 257, 2, 4, 64, 320};
    std::memcpy(want.data(), h, sizeof(h));
    for (float x : llmc) {
      if (prec == Precision::fp32) {
        want.insert(want.end(), reinterpret_cast<const char*>(&x), reinterpret_cast<const char*>(&x) + 4);
      } else {
        const bf16 b = float_to_bf16(x);
        want.insert(want.end(), reinterpret_cast<const char*>(&b), reinterpret_cast<const char*>(&b) + 2);
      }
    }
    write_model_file(dir.file("whole.bin"), cfg, prec, p.data());
    CHECK((slurp(dir.file("whole.bin")) == want));
    // Chunks of 1000 (crossing tensor boundaries), last chunk first, as zero3's units come.
    {
      ModelFileWriter w(dir.file("chunks.bin"), cfg, prec);
      for (size_t end = n; end > 0;) {
        const size_t begin = end > 1000 ? end - 1000 : 0;
        w.write(begin, p.data() + begin, end - begin);
        end = begin;
      }
      w.commit();
    }
    CHECK((slurp(dir.file("chunks.bin")) == want));
    // A writer that did not get every parameter refuses to commit and leaves no file.
    {
      ModelFileWriter w(dir.file("short.bin"), cfg, prec);
      w.write(0, p.data(), n - 1);
      CHECK_THROWS_WITH(w.commit(), Catch::Contains("of " + std::to_string(n) + " parameters written"));
    }
    CHECK_FALSE(fs::exists(dir.file("short.bin")));
  }
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 2);  // no temporary file left behind
}

TEST_CASE("llm.c order <-> internal order round trip and known positions", "[checkpoint]") {
  GPT2Config cfg = model_preset("tiny");
  cfg.num_layers = 3;
  finalize_config(cfg);
  const ParamLayout lay = build_param_layout(cfg);
  std::vector<float> internal(lay.total), llmc(lay.total), back(lay.total);
  for (size_t i = 0; i < lay.total; ++i) internal[i] = float(i);
  internal_to_llmc(cfg, internal.data(), llmc.data());
  llmc_to_internal(cfg, llmc.data(), back.data());
  REQUIRE(std::memcmp(back.data(), internal.data(), 4 * lay.total) == 0);
  const size_t C = 64, Vp = 320, maxT = 64, L = 3;
  // llm.c: wte, wpe, ln1w[0..L), ln1b[0..L), qkvw[0..L), ...
  CHECK(llmc[0] == float(lay.find(ParamKind::wte).offset));
  CHECK(llmc[Vp * C] == float(lay.find(ParamKind::wpe).offset));
  CHECK(llmc[Vp * C + maxT * C + 1 * C] == float(lay.find(ParamKind::ln1w, 1).offset));
  CHECK(llmc[Vp * C + maxT * C + L * C + 2 * C + 5] == float(lay.find(ParamKind::ln1b, 2).offset + 5));
  CHECK(llmc[lay.total - 2 * C] == float(lay.find(ParamKind::lnfw).offset));  // lnfw then lnfb last
  CHECK(llmc[lay.total - C] == float(lay.find(ParamKind::lnfb).offset));
  CHECK(llmc[lay.total - 1] == float(lay.find(ParamKind::lnfb).offset + C - 1));
}

TEST_CASE("bad model files are one-line errors naming the file", "[checkpoint]") {
  TempDir dir;
  const GPT2Config cfg = model_preset("tiny");
  std::vector<float> p = random_params(num_parameters(cfg), 3);
  const std::string good = dir.file("good.bin"), bad = dir.file("bad.bin");
  write_model_file(good, cfg, Precision::fp32, p.data());
  const std::vector<char> raw = slurp(good);

  auto expect = [&](const std::vector<char>& bytes, const char* what) {
    spit(bad, bytes);
    try {
      read_model_file(bad);
      FAIL("no error for " << what);
    } catch (const Error& e) {
      std::string msg = e.what();
      INFO(what << ": " << msg);
      CHECK(msg.find(bad) != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
    }
  };
  expect(std::vector<char>(raw.begin(), raw.begin() + 100), "truncated");
  expect(std::vector<char>(raw.begin(), raw.end() - 4), "needs");  // params cut short
  std::vector<char> b = raw;
  b.push_back(0);
  expect(b, "needs");  // trailing bytes
  b = raw;
  set_header(b, 0, 12345);
  expect(b, "bad magic");
  b = raw;
  set_header(b, 1, 4);
  expect(b, "unknown version 4");
  b = raw;
  set_header(b, 6, 1 << 30);  // absurd C: must fail before any allocation
  expect(b, "channels (C)");
  b = raw;
  set_header(b, 3, -5);
  expect(b, "vocab_size (V)");
  b = raw;
  set_header(b, 5, 3);  // C = 64 is not a multiple of NH = 3
  expect(b, "multiple of num_heads");
  b = raw;
  set_header(b, 7, 333);
  expect(b, "padded vocab");
  b = raw;
  set_header(b, 4, 1000);  // L = 1000: far larger than the file
  expect(b, "needs");
  CHECK_THROWS_WITH(read_model_file(dir.file("missing.bin")), Catch::Contains("missing.bin") && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(write_model_file(dir.file("no/such/dir/m.bin"), cfg, Precision::fp32, p.data()),
                    Catch::Contains("no/such/dir"));
}

TEST_CASE("debug-state file: round trip and bad files", "[checkpoint]") {
  TempDir dir;
  const GPT2Config cfg = model_preset("tiny");
  DebugState s;
  s.B = 2;
  s.T = 3;
  s.x = {1, 2, 3, 4, 5, 256};
  s.y = {2, 3, 4, 5, 6, 0};
  s.logits = random_params(6 * 257, 4);
  s.loss = 5.25f;
  s.grads = random_params(num_parameters(cfg), 5);
  const std::string path = dir.file("state.bin");
  write_debug_state(path, cfg, s);
  std::vector<char> raw = slurp(path);
  int32_t h[4];
  std::memcpy(h, raw.data(), sizeof(h));
  CHECK(h[0] == 20240327);
  CHECK(h[1] == 2);
  DebugState r = read_debug_state(path, cfg);
  CHECK(r.B == 2);
  CHECK(r.T == 3);
  CHECK(r.x == s.x);
  CHECK(r.y == s.y);
  CHECK(r.logits == s.logits);
  CHECK(r.loss == s.loss);
  CHECK(std::memcmp(r.grads.data(), s.grads.data(), 4 * s.grads.size()) == 0);

  const std::string bad = dir.file("bad_state.bin");
  std::vector<char> b = raw;
  set_header(b, 0, 20240326);
  spit(bad, b);
  CHECK_THROWS_WITH(read_debug_state(bad, cfg), Catch::Contains("bad_state.bin") && Catch::Contains("bad magic"));
  b = raw;
  set_header(b, 3, 1 << 28);  // T beyond maxT
  spit(bad, b);
  CHECK_THROWS_WITH(read_debug_state(bad, cfg), Catch::Contains("bad batch shape"));
  b = raw;
  b.resize(b.size() - 8);
  spit(bad, b);
  CHECK_THROWS_WITH(read_debug_state(bad, cfg), Catch::Contains("needs"));
  b = raw;
  int32_t big = 999;
  std::memcpy(b.data() + 1024, &big, 4);  // x[0] outside the vocab
  spit(bad, b);
  CHECK_THROWS_WITH(read_debug_state(bad, cfg), Catch::Contains("outside [0, 257)"));
  GPT2Config other = cfg;
  other.num_layers = 3;
  finalize_config(other);
  CHECK_THROWS_WITH(read_debug_state(path, other), Catch::Contains("needs"));  // wrong model
}

TEST_CASE("debug-state headers that promise terabytes are refused before anything is allocated", "[checkpoint]") {
  // Issue 11: a crafted B x T made verify allocate 1 TiB. Every B, T pair below fits the
  // shape bounds; the sizes they imply are far past the (small) file.
  TempDir dir;
  GPT2Config cfg = model_preset("tiny");
  cfg.max_seq_len = 1 << 20;
  finalize_config(cfg);
  std::vector<char> b(4096, 0);
  set_header(b, 0, 20240327);
  set_header(b, 1, 2);
  const std::string bad = dir.file("huge_state.bin");
  for (auto [B, T] : {std::pair{1 << 20, 1 << 20}, {1 << 20, 1}, {1, 1 << 20}, {65535, 65537}, {4096, 1 << 20}}) {
    set_header(b, 2, B);
    set_header(b, 3, T);
    spit(bad, b);
    CHECK_THROWS_WITH(read_debug_state(bad, cfg), Catch::Contains("huge_state.bin") && Catch::Contains("needs"));
  }
}
