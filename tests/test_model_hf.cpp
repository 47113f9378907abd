// Hugging Face GPT-2 directories and safetensors files (model/hf_gpt2.h, model/safetensors.h):
// the tiny fixture transformers wrote (tests/fixtures/hf_gpt2_tiny, with its script) imports
// with transformers' logits, round-trips bitwise, reads sharded, fp16 and bf16, and every
// kind of bad file, made here one defect at a time, is refused with one line naming it.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "base/check.h"
#include "model/gpt2.h"
#include "model/hf_gpt2.h"
#include "model/layout.h"
#include "model/safetensors.h"
#include "tests/gpu_compare.h"
#include "tests/test_paths.h"

using namespace rz;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const char* sub = "") { return fs::path(RINGZERO_SOURCE_DIR) / "tests/fixtures/hf_gpt2_tiny" / sub; }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("rz_hf_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path sub(const std::string& name) const {
    const fs::path p = path / name;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the rz::Error fn throws ("" when it throws none), checked to be one line.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);
    return m;
  }
  return "";
}

// Every parameter of an hf: directory in the internal layout.
std::vector<float> import_dir(const fs::path& dir, GPT2Config* cfg = nullptr) {
  const HfGpt2Dir d = inspect_hf_gpt2(dir.string());
  std::vector<float> p(num_parameters(d.cfg), -1.0f);
  read_hf_gpt2(dir.string(), [&](size_t b, const float* x, size_t n) { std::copy(x, x + n, p.begin() + b); });
  if (cfg) *cfg = d.cfg;
  return p;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A file's tensors as raw bytes, to be changed and written back (with the format's writer).
struct RawTensor {
  std::string name;
  SafeDType dtype;
  std::vector<uint64_t> shape;
  std::string bytes;
};
std::vector<RawTensor> load_raw(const fs::path& file) {
  SafetensorsFile f(file.string());
  std::vector<RawTensor> out;
  for (const SafeTensorInfo& t : f.tensors()) {
    RawTensor r{t.name, t.dtype, t.shape, std::string(t.end - t.begin, '\0')};
    f.read_bytes(t, 0, r.bytes.size(), r.bytes.data());
    out.push_back(std::move(r));
  }
  return out;
}
void save_raw(const fs::path& file, const std::vector<RawTensor>& ts) {
  std::vector<SafeTensorSpec> specs;
  for (const RawTensor& t : ts) specs.push_back({t.name, t.dtype, t.shape});
  write_safetensors(file.string(), specs, {{"format", "pt"}},
                    [&](size_t i, const SafeBytesSink& put) { put(ts[i].bytes.data(), ts[i].bytes.size()); });
}
RawTensor* find_raw(std::vector<RawTensor>& ts, const std::string& name) {
  for (RawTensor& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

// A safetensors file from a header text and a data area, byte for byte.
void write_crafted(const fs::path& file, const std::string& header, const std::string& data,
                   uint64_t header_len = UINT64_MAX) {
  const uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  spit(file, bytes + header + data);
}

// A copy of the fp32 fixture directory whose tensors `edit` changed (config.json as it is).
fs::path edited_copy(const TempDir& t, const std::string& name, const std::function<void(std::vector<RawTensor>&)>& edit) {
  const fs::path d = t.sub(name);
  fs::copy_file(fixture("fp32/config.json"), d / "config.json");
  std::vector<RawTensor> ts = load_raw(fixture("fp32/model.safetensors"));
  edit(ts);
  save_raw(d / "model.safetensors", ts);
  return d;
}

// A copy of the fp32 fixture directory whose config.json `edit` changed.
fs::path config_copy(const TempDir& t, const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path d = t.sub(name);
  fs::copy_file(fixture("fp32/model.safetensors"), d / "model.safetensors");
  nlohmann::json c = nlohmann::json::parse(slurp(fixture("fp32/config.json")));
  edit(c);
  spit(d / "config.json", c.dump(2));
  return d;
}

}  // namespace

TEST_CASE("hf fixture: ringzero's logits are transformers' (fp32, fp16 sharded, bf16 tensors)", "[hf]") {
  const nlohmann::json tj = nlohmann::json::parse(slurp(fixture("tokens.json")));
  const std::vector<int> tokens = tj["tokens"].get<std::vector<int>>();
  const int T = static_cast<int>(tokens.size());
  for (const char* variant : {"fp32", "fp16_sharded", "bf16"}) {
    INFO(variant);
    GPT2Config cfg;
    const std::vector<float> params = import_dir(fixture(variant), &cfg);
    REQUIRE(cfg.vocab_size == 257);
    REQUIRE(cfg.padded_vocab_size == 320);
    // The padding rows V..Vp-1 of wte are zero.
    const ParamLayout lay = build_param_layout(cfg);
    const ParamTensor& wte = lay.find(ParamKind::wte);
    for (size_t i = size_t(cfg.vocab_size) * cfg.channels; i < wte.numel; ++i) REQUIRE(params[wte.offset + i] == 0.0f);
    GPT2 model(cfg, ModelOptions{Precision::fp32});
    model.set_params_f32(params.data());
    model.forward(tokens.data(), nullptr, 1, T);
    std::vector<float> padded, got;
    model.logits_f32(padded);
    for (int t = 0; t < T; ++t)
      got.insert(got.end(), padded.begin() + size_t(t) * cfg.padded_vocab_size,
                 padded.begin() + size_t(t) * cfg.padded_vocab_size + cfg.vocab_size);
    const std::string ref_bytes = slurp(fixture((std::string("logits_") + std::string(variant).substr(0, 4) + ".f32").c_str()));
    std::vector<float> ref(ref_bytes.size() / 4);
    std::memcpy(ref.data(), ref_bytes.data(), ref.size() * 4);
    REQUIRE(ref.size() == got.size());
    const test::Outside o = test::outside_tolerance(got, ref, test::tol<float>());
    INFO(o.first);
    CHECK(o.bad == 0);
  }
}

TEST_CASE("hf: import -> export -> import is bitwise, and the export's tensors are transformers' bytes", "[hf]") {
  TempDir t;
  for (const auto& [variant, prec] : {std::pair{"fp32", Precision::fp32}, std::pair{"bf16", Precision::bf16}}) {
    INFO(variant);
    GPT2Config cfg;
    const std::vector<float> p1 = import_dir(fixture(variant), &cfg);
    const fs::path out = t.path / (std::string("out_") + variant);
    write_hf_gpt2(out.string(), cfg, prec, p1.data(), false);
    CHECK(bitwise_equal(import_dir(out), p1));
    // Every tensor transformers wrote is in the export byte for byte (Conv1D orientation,
    // padding rows dropped, names with the prefix), and nothing else is.
    const std::vector<RawTensor> theirs = load_raw(fixture((std::string(variant) + "/model.safetensors").c_str()));
    std::vector<RawTensor> ours = load_raw(out / "model.safetensors");
    CHECK(ours.size() == theirs.size());
    for (const RawTensor& r : theirs) {
      INFO(r.name);
      const RawTensor* o = find_raw(ours, r.name);
      REQUIRE(o != nullptr);
      CHECK(o->shape == r.shape);
      CHECK(o->dtype == r.dtype);
      CHECK(o->bytes == r.bytes);
    }
    CHECK(SafetensorsFile((out / "model.safetensors").string()).metadata().at("format") == "pt");
    CHECK(inspect_hf_gpt2(out.string()).cfg.num_layers == cfg.num_layers);
  }
}

TEST_CASE("hf: names without 'transformer.', old attention-mask buffers and a tied lm_head read the same", "[hf]") {
  TempDir t;
  const std::vector<float> ref = import_dir(fixture("fp32"));
  const fs::path d = edited_copy(t, "legacy", [](std::vector<RawTensor>& ts) {
    std::string wte;
    for (RawTensor& r : ts) {
      r.name = r.name.substr(std::strlen("transformer."));
      if (r.name == "wte.weight") wte = r.bytes;
    }
    for (int l = 0; l < 2; ++l) {  // as GPT-2's own upload has them
      ts.push_back({"h." + std::to_string(l) + ".attn.bias", SafeDType::F32, {1, 1, 64, 64}, std::string(64 * 64 * 4, '\1')});
      ts.push_back({"h." + std::to_string(l) + ".attn.masked_bias", SafeDType::F32, {}, std::string(4, '\0')});
    }
    ts.push_back({"lm_head.weight", SafeDType::F32, {257, 32}, wte});
  });
  CHECK(bitwise_equal(import_dir(d), ref));
  // The sharded fp16 directory lists its shards; a single file is preferred when both exist.
  const HfGpt2Dir sh = inspect_hf_gpt2(fixture("fp16_sharded").string());
  CHECK(sh.weight_files.size() == 2);
  CHECK(sh.files.size() == 4);  // config.json, the index, two shards
}

TEST_CASE("safetensors: every kind of bad header is refused with one line naming the file and the defect", "[hf]") {
  TempDir t;
  const fs::path f = t.path / "bad.safetensors";
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\0');
  struct Case {
    std::string header, data;
    uint64_t len;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"", "", UINT64_MAX, "shorter than the 8-byte header length"},  // written as 3 bytes below
      {"{}", "", 1000, "header length 1000, but only 2 bytes follow it"},
      {"{}", "", uint64_t{1} << 40, "more than the format's 100000000 bytes"},
      {"[1,2]", "", UINT64_MAX, "does not start with '{'"},
      {"{\"a\":", "", UINT64_MAX, "not valid JSON"},
      {"{" + ok_entry + "," + ok_entry + "}", data8, UINT64_MAX, "key 'a' appears twice"},
      {R"({"a":{"dtype":"F32","shape":[[[1]]],"data_offsets":[0,4]}})", "", UINT64_MAX, "nests deeper than 3"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", data8, UINT64_MAX, "tensor 'a': unknown dtype 'Q4'"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8, UINT64_MAX,
       "tensor 'a': data_offsets [0, 8] hold 8 bytes, but dtype F32 and shape [3] need 12"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data8, UINT64_MAX,
       "does not fit in 64 bits"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8, UINT64_MAX, "end before they begin"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8, UINT64_MAX,
       "data_offsets end at 16, past the 8-byte data area"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       data8, UINT64_MAX, "tensor 'b' (bytes 4..8) overlaps tensor 'a'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8, UINT64_MAX,
       "4 bytes before tensor 'a' belong to no tensor"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data8, UINT64_MAX,
       "the last 4 bytes of the data area belong to no tensor"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", data8, UINT64_MAX, "unknown field 'extra'"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8, UINT64_MAX,
       "shape holds -2, expected a non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", data8, UINT64_MAX, "tensor 'a': no data_offsets"},
      {R"({"__metadata__":{"format":1},)" + ok_entry + "}", data8, UINT64_MAX, "__metadata__ 'format' is not a string"},
      {"{\"a\\nb\":{\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,0]}}", "", UINT64_MAX, "tensor 'a\\x0ab'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO("case " << i << ": " << c.header);
    if (i == 0) spit(f, "abc");
    else write_crafted(f, c.header, c.data, c.len);
    const std::string e = error_of([&] { SafetensorsFile s(f.string()); });
    CHECK(e.find(c.expect) != std::string::npos);
    CHECK(e.find(f.string()) != std::string::npos);
  }
  // The good one reads; a dtype that is not a float is refused when read as one, by name.
  write_crafted(f, R"({"__metadata__":{"format":"pt"},"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", data8);
  SafetensorsFile s(f.string());
  REQUIRE(s.tensors().size() == 1);
  float out[2];
  CHECK(error_of([&] { s.read_f32(s.tensors()[0], 0, 2, out); }).find("tensor 'i' is I32; ringzero reads F32, F16 or BF16") !=
        std::string::npos);
  // A FIFO or a directory is refused before anything opens it for reading.
  CHECK(error_of([&] { SafetensorsFile d(t.path.string()); }).find("not a regular file") != std::string::npos);
}

TEST_CASE("safetensors: fp16 and bf16 widen exactly", "[hf]") {
  // Every fp16 bit pattern widens to the value the IEEE format gives it.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    const int exp = (h >> 10) & 31, mant = h & 1023;
    const double sign = (h & 0x8000) ? -1 : 1;
    if (exp == 31) {
      CHECK((mant == 0 ? std::isinf(f) : std::isnan(f)));
      continue;
    }
    const double want = exp == 0 ? sign * std::ldexp(mant, -24) : sign * std::ldexp(1024 + mant, exp - 25);
    if (double(f) != want) FAIL("half " << h << ": " << f << " vs " << want);
  }
}

TEST_CASE("hf: a directory whose config or tensors ringzero does not compute is refused by name", "[hf]") {
  TempDir t;
  struct Case {
    fs::path dir;
    std::string expect;
  };
  const std::string wte = "transformer.wte.weight";
  std::vector<Case> cases = {
      {config_copy(t, "llama", [](auto& c) { c["model_type"] = "llama"; }), "model_type 'llama' is not GPT-2"},
      {config_copy(t, "eps", [](auto& c) { c["layer_norm_epsilon"] = 1e-6; }), "layer_norm_epsilon 1e-06"},
      {config_copy(t, "relu", [](auto& c) { c["activation_function"] = "relu"; }), "activation_function 'relu'"},
      {config_copy(t, "untied", [](auto& c) { c["tie_word_embeddings"] = false; }), "tie_word_embeddings is false"},
      {config_copy(t, "arch", [](auto& c) { c["architectures"] = {"GPT2ForSequenceClassification"}; }),
       "architecture 'GPT2ForSequenceClassification'"},
      {config_copy(t, "inner", [](auto& c) { c["n_inner"] = 100; }), "n_inner 100"},
      {config_copy(t, "heads", [](auto& c) { c["n_head"] = 3; }), "multiple of num_heads"},
      {config_copy(t, "layers", [](auto& c) { c["n_layer"] = "two"; }), "n_layer is \"two\", expected a positive integer"},
      {config_copy(t, "vocab", [](auto& c) { c["vocab_size"] = 300; }),
       "tensor 'transformer.wte.weight' has shape [257, 32], but config.json"},
      {edited_copy(t, "missing", [](auto& ts) { ts.erase(ts.begin() + (find_raw(ts, "transformer.h.1.mlp.c_fc.bias") - ts.data())); }),
       "tensor 'h.1.mlp.c_fc.bias' is missing"},
      {edited_copy(t, "unknown", [](auto& ts) { ts.push_back({"transformer.h.0.attn.rotary", SafeDType::F32, {1}, std::string(4, '\0')}); }),
       "tensor 'transformer.h.0.attn.rotary' is not a GPT-2 parameter"},
      {edited_copy(t, "linear", [](auto& ts) { std::swap(find_raw(ts, "transformer.h.1.mlp.c_fc.weight")->shape[0], find_raw(ts, "transformer.h.1.mlp.c_fc.weight")->shape[1]); }),
       "tensor 'transformer.h.1.mlp.c_fc.weight' has shape [128, 32], but config.json"},
      {edited_copy(t, "int", [](auto& ts) { find_raw(ts, "transformer.ln_f.bias")->dtype = SafeDType::I32; }),
       "tensor 'transformer.ln_f.bias' is I32; ringzero reads F32, F16 or BF16"},
      {edited_copy(t, "twice", [&](auto& ts) { RawTensor r = *find_raw(ts, wte); r.name = "wte.weight"; ts.push_back(r); }),
       "tensor 'wte.weight' appears twice"},
      {edited_copy(t, "lm_head", [&](auto& ts) { RawTensor r = *find_raw(ts, wte); r.name = "lm_head.weight"; r.bytes[100] ^= 1; ts.push_back(r); }),
       "lm_head.weight differs from wte.weight"},
  };
  // Sharded: a shard outside the directory, a shard that lacks what the index says it holds.
  for (const auto& [name, edit, expect] :
       {std::tuple<std::string, std::string, std::string>{"escape", "../model-00001-of-00002.safetensors", "not a plain file name"},
        {"subdir", "sub/model.safetensors", "not a plain file name"},
        {"wrong_shard", "", "but model.safetensors.index.json maps it to"}}) {
    const fs::path d = t.sub(name);
    for (const auto& e : fs::directory_iterator(fixture("fp16_sharded"))) fs::copy_file(e.path(), d / e.path().filename());
    nlohmann::json idx = nlohmann::json::parse(slurp(d / "model.safetensors.index.json"));
    auto& shard = idx["weight_map"]["transformer.h.0.attn.c_attn.bias"];
    const std::string other = shard == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                                           : "model-00001-of-00002.safetensors";
    shard = edit.empty() ? other : edit;
    spit(d / "model.safetensors.index.json", idx.dump());
    cases.push_back({d, expect});
  }
  const fs::path nocfg = t.sub("no_config");
  cases.push_back({nocfg, "no config.json in it"});
  const fs::path noweights = t.sub("no_weights");
  fs::copy_file(fixture("fp32/config.json"), noweights / "config.json");
  spit(noweights / "pytorch_model.bin", "pickle");
  cases.push_back({noweights, "pytorch_model.bin is a Python pickle"});
  for (const Case& c : cases) {
    INFO(c.dir.string());
    const std::string e = error_of([&] { import_dir(c.dir); });
    INFO(e);
    CHECK(e.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("hf export: a non-empty directory needs overwrite, which replaces only the model files", "[hf]") {
  TempDir t;
  GPT2Config cfg;
  const std::vector<float> p = import_dir(fixture("fp32"), &cfg);
  const fs::path d = t.sub("out");
  for (const auto& e : fs::directory_iterator(fixture("fp16_sharded"))) fs::copy_file(e.path(), d / e.path().filename());
  spit(d / "tokenizer.json", "{}");
  CHECK(error_of([&] { write_hf_gpt2(d.string(), cfg, Precision::fp32, p.data(), false); })
            .find("exists and is not empty (--overwrite replaces its model files)") != std::string::npos);
  write_hf_gpt2(d.string(), cfg, Precision::fp32, p.data(), true);
  CHECK_FALSE(fs::exists(d / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(d / "model-00001-of-00002.safetensors"));
  CHECK(fs::exists(d / "tokenizer.json"));
  CHECK(bitwise_equal(import_dir(d), p));
  // Never over something that is not a regular file.
  const fs::path e = t.sub("nonregular");
  fs::create_directories(e / "model.safetensors");
  CHECK(error_of([&] { write_hf_gpt2(e.string(), cfg, Precision::fp32, p.data(), true); }).find("is a directory") !=
        std::string::npos);
  spit(t.path / "file", "x");
  CHECK(error_of([&] { write_hf_gpt2((t.path / "file").string(), cfg, Precision::fp32, p.data(), true); })
            .find("not a directory") != std::string::npos);
}
