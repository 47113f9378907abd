// model/llmc_file.h: llm.c's model and debug-state files.
//
// Both start with a header of 256 little-endian int32.
//   model file   [0]=20240326 [1]=3 (fp32) or 5 (bf16) [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp,
//                then every parameter in llm.c's order: wte (Vp,C), wpe (maxT,C), ln1w (L,C),
//                ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C), attprojb (L,C),
//                ln2w (L,C), ln2b (L,C), fcw (L,4C,C), fcb (L,4C), fcprojw (L,C,4C),
//                fcprojb (L,C), lnfw (C), lnfb (C).
//   debug state  [0]=20240327 [1]=2 [2]=B [3]=T, then x (B,T) int32, y (B,T) int32,
//                logits (B,T,V) fp32 (unpadded), loss fp32, gradients fp32 in the model
//                file's order (wte with Vp rows).
// In memory ringzero keeps the internal (gradient-ready) layout; these functions convert.
// Every problem with a file is a one-line rz::Error naming the file; sizes are checked
// against the file's length before anything large is allocated. Writes are atomic: a
// temporary file in the same directory, fsync'd, then renamed over the target.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace rz {

constexpr int kModelMagic = 20240326;
constexpr int kModelVersionFp32 = 3;
constexpr int kModelVersionBf16 = 5;
constexpr int kStateMagic = 20240327;
constexpr int kStateVersion = 2;

// internal (layout.h order) <-> llm.c order; both arrays hold num_parameters(cfg) floats.
void internal_to_llmc(const GPT2Config& cfg, const float* internal, float* llmc);
void llmc_to_internal(const GPT2Config& cfg, const float* llmc, float* internal);

struct ModelFile {
  GPT2Config cfg;
  Precision precision = Precision::fp32;  // version 3 -> fp32, 5 -> bf16
  std::vector<float> params;              // internal layout, widened to fp32
};
ModelFile read_model_file(const std::string& path);
// Reads only the header: the config and precision (params left empty); resume compares it.
ModelFile read_model_header(const std::string& path);
// The parameters a chunk at a time, with no full-size array: sink(begin, data, n) gets
// internal-layout elements [begin, begin + n) widened to fp32, tensor by tensor in layout
// order. Returns the header (params left empty).
using ParamChunkSink = std::function<void(size_t begin, const float* data, size_t n)>;
ModelFile read_model_file_chunks(const std::string& path, const ParamChunkSink& sink);
// params_internal: num_parameters(cfg) floats; rounded to bf16 (RNE) when precision is bf16.
void write_model_file(const std::string& path, const GPT2Config& cfg, Precision precision,
                      const float* params_internal);

// The same file written a chunk at a time, with no full-size array: write(begin, data, n)
// takes internal-layout elements [begin, begin + n) in any order and puts each tensor's part
// at its place in llm.c's order (seek + write; bf16 is rounded through a small fixed
// buffer). commit() checks that every parameter was written once in all and renames the
// file into place (atomic, as write_model_file). The bytes are write_model_file's.
class ModelFileWriter {
 public:
  ModelFileWriter(const std::string& path, const GPT2Config& cfg, Precision precision);
  ~ModelFileWriter();
  ModelFileWriter(const ModelFileWriter&) = delete;
  ModelFileWriter& operator=(const ModelFileWriter&) = delete;
  void write(size_t begin, const float* data, size_t n);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct DebugState {
  int B = 0, T = 0;
  std::vector<int> x, y;       // (B, T)
  std::vector<float> logits;   // (B, T, V)
  float loss = 0.0f;
  std::vector<float> grads;    // internal layout (num_parameters(cfg))
};
// cfg gives V and the parameter count the file must hold.
DebugState read_debug_state(const std::string& path, const GPT2Config& cfg);
void write_debug_state(const std::string& path, const GPT2Config& cfg, const DebugState& s);

}  // namespace rz
