// model/llmc_file.cpp: llm.c model and debug-state files (see llmc_file.h).
#include "model/llmc_file.h"

#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/bf16.h"
#include "base/check.h"
#include "base/memory.h"
#include "model/layout.h"

namespace rz {

namespace {

// Per layout tensor: the index of its first element in llm.c's order, which is ParamKind's
// order with the per-layer tensors of one kind stacked over layers 0..L-1.
std::vector<size_t> llmc_positions(const GPT2Config& cfg, const ParamLayout& lay) {
  RZ_CHECK(cfg.family == ModelFamily::gpt2,
           "llm.c's model and debug-state files hold GPT-2 only, and this model is of the %s family (%s): write it as "
           "a Hugging Face directory (export --to hf:DIR), the %s family's file", family_name(cfg.family),
           describe_shape(cfg).c_str(), family_name(cfg.family));
  std::vector<size_t> at(lay.tensors.size(), 0);
  size_t pos = 0;
  for (int k = 0; k <= static_cast<int>(ParamKind::lnfb); ++k) {  // GPT-2's kinds, in llm.c's order
    const ParamKind kind = static_cast<ParamKind>(k);
    const bool per_layer = kind != ParamKind::wte && kind != ParamKind::wpe && kind != ParamKind::lnfw &&
                           kind != ParamKind::lnfb;
    for (int l = per_layer ? 0 : -1; l < (per_layer ? cfg.num_layers : 0); ++l) {
      const ParamTensor& t = lay.find(kind, l);
      at[static_cast<size_t>(&t - lay.tensors.data())] = pos;
      pos += t.numel;
    }
  }
  RZ_ENFORCE_EQ(pos, lay.total);
  return at;
}

// Copies each tensor between the two orders.
template <bool kToLlmc>
void convert_order(const GPT2Config& cfg, const float* src, float* dst) {
  const ParamLayout lay = build_param_layout(cfg);
  const std::vector<size_t> pos = llmc_positions(cfg, lay);
  for (size_t i = 0; i < lay.tensors.size(); ++i) {
    const ParamTensor& t = lay.tensors[i];
    if (kToLlmc)
      std::memcpy(dst + pos[i], src + t.offset, t.numel * sizeof(float));
    else
      std::memcpy(dst + t.offset, src + pos[i], t.numel * sizeof(float));
  }
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

FilePtr open_for_read(const std::string& path, const char* what, size_t& size) {
  struct stat st;
  RZ_CHECK(::stat(path.c_str(), &st) == 0, "%s %s: cannot open: %s", what, path.c_str(),
           std::strerror(errno));
  check_input_file(path, what);  // a FIFO or a directory, named: refused before fopen could block
  FILE* f = std::fopen(path.c_str(), "rb");
  RZ_CHECK(f != nullptr, "%s %s: cannot open: %s", what, path.c_str(), std::strerror(errno));
  size = size_t(st.st_size);
  return FilePtr(f);
}

void read_exact(FILE* f, void* dst, size_t bytes, const char* what, const std::string& path) {
  RZ_CHECK(std::fread(dst, 1, bytes, f) == bytes, "%s %s: truncated (short read of %zu bytes)", what,
           path.c_str(), bytes);
}

void read_header(FILE* f, size_t file_size, int32_t header[256], const char* what,
                 const std::string& path) {
  RZ_CHECK(file_size >= 1024, "%s %s: truncated: %zu bytes, shorter than the 1024-byte header", what,
           path.c_str(), file_size);
  read_exact(f, header, 1024, what, path);
}

GPT2Config config_from_header(const int32_t* h, const std::string& path) {
  GPT2Config cfg;
  cfg.max_seq_len = h[2];
  cfg.vocab_size = h[3];
  cfg.num_layers = h[4];
  cfg.num_heads = h[5];
  cfg.channels = h[6];
  try {
    finalize_config(cfg);
  } catch (const Error& e) {
    RZ_FAIL("model file %s: bad header: %s", path.c_str(), e.what());
  }
  RZ_CHECK(h[7] == cfg.padded_vocab_size,
           "model file %s: header padded vocab Vp=%d, expected %d (V=%d rounded up to 64)", path.c_str(),
           h[7], cfg.padded_vocab_size, cfg.vocab_size);
  return cfg;
}

ModelFile read_model(const std::string& path, bool with_params) {
  const char* what = "model file";
  size_t size = 0;
  FilePtr f = open_for_read(path, what, size);
  int32_t h[256];
  read_header(f.get(), size, h, what, path);
  // A safetensors file starts with its header's length (8 bytes) and then '{': the model of a
  // Hugging Face directory (every family's file), which this reader of llm.c's GPT-2 files
  // names rather than calling a bad magic.
  const auto* bytes = reinterpret_cast<const unsigned char*>(h);
  RZ_CHECK(h[0] == kModelMagic || bytes[8] != '{',
           "model file %s: a safetensors file (a Hugging Face model's weights), not an llm.c model file: pass its "
           "directory as hf:DIR", path.c_str());
  RZ_CHECK(h[0] == kModelMagic, "model file %s: bad magic %d, expected %d (an llm.c model checkpoint)",
           path.c_str(), h[0], kModelMagic);
  RZ_CHECK(h[1] == kModelVersionFp32 || h[1] == kModelVersionBf16,
           "model file %s: unknown version %d, expected 3 (fp32) or 5 (bf16)", path.c_str(), h[1]);
  ModelFile mf;
  mf.cfg = config_from_header(h, path);
  mf.precision = h[1] == kModelVersionFp32 ? Precision::fp32 : Precision::bf16;
  const size_t n = num_parameters(mf.cfg);
  const size_t esize = precision_bytes(mf.precision);
  const size_t expected = 1024 + n * esize;
  RZ_CHECK(size == expected,
           "model file %s: %zu bytes, but its header (L=%d C=%d V=%d maxT=%d, %s) needs %zu", path.c_str(),
           size, mf.cfg.num_layers, mf.cfg.channels, mf.cfg.vocab_size, mf.cfg.max_seq_len,
           precision_name(mf.precision), expected);
  if (!with_params) return mf;
  std::vector<float> llmc;
  resize_or_fail(llmc, n, "the model file's parameters");
  if (mf.precision == Precision::fp32) {
    read_exact(f.get(), llmc.data(), n * 4, what, path);
  } else {
    std::vector<bf16> raw(n);
    read_exact(f.get(), raw.data(), n * 2, what, path);
    for (size_t i = 0; i < n; ++i) llmc[i] = bf16_to_float(raw[i]);
  }
  resize_or_fail(mf.params, n, "the model's parameters");
  llmc_to_internal(mf.cfg, llmc.data(), mf.params.data());
  return mf;
}

}  // namespace

void internal_to_llmc(const GPT2Config& cfg, const float* internal, float* llmc) {
  convert_order<true>(cfg, internal, llmc);
}
void llmc_to_internal(const GPT2Config& cfg, const float* llmc, float* internal) {
  convert_order<false>(cfg, llmc, internal);
}

ModelFile read_model_file(const std::string& path) { return read_model(path, true); }
ModelFile read_model_header(const std::string& path) { return read_model(path, false); }

ModelFile read_model_file_chunks(const std::string& path, const ParamChunkSink& sink) {
  ModelFile mf = read_model(path, false);  // header and size checked
  const char* what = "model file";
  size_t size = 0;
  FilePtr f = open_for_read(path, what, size);
  const ParamLayout lay = build_param_layout(mf.cfg);
  const std::vector<size_t> pos = llmc_positions(mf.cfg, lay);
  const size_t esize = precision_bytes(mf.precision);
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<float> chunk(kChunk);
  std::vector<bf16> raw(mf.precision == Precision::bf16 ? kChunk : 0);
  for (size_t i = 0; i < lay.tensors.size(); ++i) {
    const ParamTensor& t = lay.tensors[i];
    RZ_CHECK(std::fseek(f.get(), static_cast<long>(1024 + pos[i] * esize), SEEK_SET) == 0, "%s %s: seek failed: %s",
             what, path.c_str(), std::strerror(errno));
    for (size_t at = 0; at < t.numel; at += kChunk) {
      const size_t n = std::min(kChunk, t.numel - at);
      if (mf.precision == Precision::fp32) {
        read_exact(f.get(), chunk.data(), n * sizeof(float), what, path);
      } else {
        read_exact(f.get(), raw.data(), n * sizeof(bf16), what, path);
        for (size_t q = 0; q < n; ++q) chunk[q] = bf16_to_float(raw[q]);
      }
      sink(t.offset + at, chunk.data(), n);
    }
  }
  return mf;
}

struct ModelFileWriter::Impl {
  GPT2Config cfg;
  Precision precision;
  ParamLayout layout;
  std::vector<size_t> llmc_pos;  // per layout tensor: its first element's index in llm.c's order
  AtomicFile file;
  size_t written = 0;
  std::vector<bf16> raw;  // bf16 rounding buffer (fixed size)
  Impl(const std::string& path, const GPT2Config& c, Precision p) : cfg(c), precision(p), file(path) {}
};

ModelFileWriter::ModelFileWriter(const std::string& path, const GPT2Config& cfg_in, Precision precision) {
  GPT2Config cfg = cfg_in;
  finalize_config(cfg);
  impl_ = std::make_unique<Impl>(path, cfg, precision);
  Impl& m = *impl_;
  m.layout = build_param_layout(cfg);
  m.llmc_pos = llmc_positions(cfg, m.layout);
  int32_t h[256] = {};
  h[0] = kModelMagic;
  h[1] = precision == Precision::fp32 ? kModelVersionFp32 : kModelVersionBf16;
  h[2] = cfg.max_seq_len;
  h[3] = cfg.vocab_size;
  h[4] = cfg.num_layers;
  h[5] = cfg.num_heads;
  h[6] = cfg.channels;
  h[7] = cfg.padded_vocab_size;
  m.file.write(h, sizeof(h));
}

ModelFileWriter::~ModelFileWriter() = default;

void ModelFileWriter::write(size_t begin, const float* data, size_t n) {
  Impl& m = *impl_;
  const auto& ts = m.layout.tensors;
  RZ_CHECK(begin <= m.layout.total && n <= m.layout.total - begin, "%s: parameters [%zu, +%zu) outside the %zu",
           m.file.path().c_str(), begin, n, m.layout.total);
  const size_t esize = precision_bytes(m.precision), end = begin + n;
  // The first tensor that ends after `begin` (tensors are in offset order).
  size_t i = static_cast<size_t>(std::upper_bound(ts.begin(), ts.end(), begin, [](size_t off, const ParamTensor& t) {
                                   return off < t.offset + t.numel;
                                 }) - ts.begin());
  for (; i < ts.size() && ts[i].offset < end; ++i) {
    const size_t a = std::max(begin, ts[i].offset), e = std::min(end, ts[i].offset + ts[i].numel);
    m.file.seek(1024 + (m.llmc_pos[i] + (a - ts[i].offset)) * esize);
    const float* src = data + (a - begin);
    if (m.precision == Precision::fp32) {
      m.file.write(src, (e - a) * sizeof(float));
    } else {
      constexpr size_t kRaw = 1 << 15;
      if (m.raw.empty()) m.raw.resize(kRaw);
      for (size_t j = 0; j < e - a; j += kRaw) {
        const size_t k = std::min(kRaw, e - a - j);
        for (size_t q = 0; q < k; ++q) m.raw[q] = float_to_bf16(src[j + q]);
        m.file.write(m.raw.data(), k * sizeof(bf16));
      }
    }
  }
  m.written += n;
}

void ModelFileWriter::commit() {
  Impl& m = *impl_;
  RZ_CHECK(m.written == m.layout.total, "%s: %zu of %zu parameters written", m.file.path().c_str(), m.written,
           m.layout.total);
  m.file.commit();
}

void write_model_file(const std::string& path, const GPT2Config& cfg, Precision precision,
                      const float* params_internal) {
  ModelFileWriter w(path, cfg, precision);
  GPT2Config c = cfg;
  finalize_config(c);
  w.write(0, params_internal, num_parameters(c));
  w.commit();
}

DebugState read_debug_state(const std::string& path, const GPT2Config& cfg) {
  const char* what = "debug-state file";
  size_t size = 0;
  FilePtr f = open_for_read(path, what, size);
  int32_t h[256];
  read_header(f.get(), size, h, what, path);
  RZ_CHECK(h[0] == kStateMagic, "debug-state file %s: bad magic %d, expected %d", path.c_str(), h[0],
           kStateMagic);
  RZ_CHECK(h[1] == kStateVersion, "debug-state file %s: unknown version %d, expected %d", path.c_str(),
           h[1], kStateVersion);
  DebugState s;
  s.B = h[2];
  s.T = h[3];
  RZ_CHECK(s.B >= 1 && s.B <= (1 << 20) && s.T >= 1 && s.T <= cfg.max_seq_len,
           "debug-state file %s: bad batch shape B=%d T=%d (need B >= 1 and 1 <= T <= maxT=%d)",
           path.c_str(), s.B, s.T, cfg.max_seq_len);
  const size_t N = size_t(s.B) * s.T, V = cfg.vocab_size, P = num_parameters(cfg);
  // In 128 bits: a crafted B and T must not wrap the product around to the file's size
  // and so pass the check below with a terabyte-sized allocation behind it.
  const unsigned __int128 expected = 1024 + 4 * ((unsigned __int128)N * (2 + V) + 1 + P);
  RZ_CHECK(expected == size,
           "debug-state file %s: %zu bytes, but B=%d T=%d with this model (V=%zu, %zu params) needs %.0f",
           path.c_str(), size, s.B, s.T, V, P, static_cast<double>(expected));
  s.x.resize(N);
  s.y.resize(N);
  s.logits.resize(N * V);
  read_exact(f.get(), s.x.data(), N * 4, what, path);
  read_exact(f.get(), s.y.data(), N * 4, what, path);
  read_exact(f.get(), s.logits.data(), N * V * 4, what, path);
  read_exact(f.get(), &s.loss, 4, what, path);
  std::vector<float> llmc(P);
  read_exact(f.get(), llmc.data(), P * 4, what, path);
  s.grads.resize(P);
  llmc_to_internal(cfg, llmc.data(), s.grads.data());
  for (size_t i = 0; i < N; ++i)
    RZ_CHECK(s.x[i] >= 0 && size_t(s.x[i]) < V && s.y[i] >= 0 && size_t(s.y[i]) < V,
             "debug-state file %s: token at position %zu outside [0, %zu)", path.c_str(), i, V);
  return s;
}

void write_debug_state(const std::string& path, const GPT2Config& cfg, const DebugState& s) {
  const size_t N = size_t(s.B) * s.T, P = num_parameters(cfg);
  RZ_CHECK(s.x.size() == N && s.y.size() == N && s.logits.size() == N * size_t(cfg.vocab_size) &&
               s.grads.size() == P,
           "write_debug_state %s: tensor sizes do not match B=%d T=%d", path.c_str(), s.B, s.T);
  int32_t h[256] = {};
  h[0] = kStateMagic;
  h[1] = kStateVersion;
  h[2] = s.B;
  h[3] = s.T;
  std::vector<float> llmc(P);
  internal_to_llmc(cfg, s.grads.data(), llmc.data());
  write_file_atomic(path, {{h, sizeof(h)},
                           {s.x.data(), N * 4},
                           {s.y.data(), N * 4},
                           {s.logits.data(), s.logits.size() * 4},
                           {&s.loss, 4},
                           {llmc.data(), P * 4}});
}

}  // namespace rz
