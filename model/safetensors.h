// model/safetensors.h: the safetensors file format, read and written, with no model in it.
//
// A safetensors file (Hugging Face's, https://github.com/huggingface/safetensors) is
//   8 bytes   N, the header's length, little-endian uint64
//   N bytes   a JSON object: tensor name -> {"dtype": "F32", "shape": [d0, d1, ...],
//             "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
//             string -> string; it starts with '{' and may be padded with spaces
//   the rest  the data area: each tensor's bytes, row-major, little-endian, at
//             [begin, end) counted from the data area's first byte
// The file is untrusted input, so everything is checked before any tensor is read, and each
// defect is a one-line rz::Error naming the file (and the tensor, and what was expected
// against what was found): N at most 100 MB and inside the file; the JSON well-formed, at
// most three levels deep, without duplicate keys; each entry has exactly those three fields;
// the dtype is one the format defines; the shape's product times the dtype's size does not
// overflow and equals end - begin; and the tensors tile the data area exactly, from 0 to its
// end, without holes or overlaps (the reference implementation's rule, which keeps a file
// from hiding bytes between tensors). Nothing is allocated from a number before it is
// checked against the file's size.
//
// Tensors are read with pread, a chunk at a time, into the caller's fp32 buffer: F32, F16 and
// BF16 convert exactly (every F16 and BF16 value is an fp32 value); any other dtype is refused
// by name. This layer knows nothing of GPT-2: model/hf_gpt2.* maps names to ringzero's layout,
// and a later model family (Llama) reads its own names through the same reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"

namespace rz {

// The dtypes the format defines (sub-byte ones aside); only F32, F16 and BF16 read as fp32.
enum class SafeDType : int { BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };
const char* safe_dtype_name(SafeDType d);  // "F32"
size_t safe_dtype_size(SafeDType d);       // bytes per element
bool safe_dtype_is_float(SafeDType d);     // F32, F16 or BF16: readable as fp32

// The safetensors format's own bound on the header (the reference reader's MAX_HEADER_SIZE).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafeTensorInfo {
  std::string name;
  SafeDType dtype = SafeDType::F32;
  std::vector<uint64_t> shape;  // empty: a scalar
  uint64_t begin = 0, end = 0;  // bytes of the data area
  uint64_t numel = 1;
};

// "[768, 2304]"
std::string shape_text(const std::vector<uint64_t>& shape);
// A name read from a file, fit for a one-line message: control and non-ASCII bytes as \xNN,
// cut at 120 characters.
std::string printable_name(std::string_view name);

// Parses and checks a header (the JSON text, its padding included) for a data area of
// data_bytes bytes. `path` only names the file in errors. Tensors come out sorted by begin.
struct SafetensorsHeader {
  std::vector<SafeTensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_bytes, const std::string& path);

class SafetensorsFile {
 public:
  // Opens and checks the file (header and tiling; tensor bytes are read on demand).
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafeTensorInfo>& tensors() const { return header_.tensors; }  // by offset
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafeTensorInfo* find(std::string_view name) const;  // null when absent

  // Elements [first, first + n) of t, widened to fp32. Throws naming the file, the tensor and
  // its dtype when the dtype is not F32, F16 or BF16, or when the range is outside t.
  void read_f32(const SafeTensorInfo& t, uint64_t first, size_t n, float* out) const;
  // The raw bytes [offset, offset + n) of t's data (any dtype).
  void read_bytes(const SafeTensorInfo& t, uint64_t offset, size_t n, void* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // 8 + N
  SafetensorsHeader header_;
};

// One tensor of a file to write: its name, dtype and shape.
struct SafeTensorSpec {
  std::string name;
  SafeDType dtype = SafeDType::F32;
  std::vector<uint64_t> shape;
};
// Hands a tensor's bytes to the writer, in order; the total must be the tensor's size.
using SafeBytesSink = std::function<void(const void* data, size_t bytes)>;

// Writes a safetensors file atomically (base/file.h's AtomicFile: a temporary file, fsync,
// rename): the header (tensors in the given order, offsets consecutive, padded with spaces to
// a multiple of 8 as the reference writer does, "__metadata__" when not empty), then each
// tensor's bytes from fill(i, sink). Throws when a tensor gets more or fewer bytes than its
// shape needs (and the target is left untouched).
void write_safetensors(const std::string& path, const std::vector<SafeTensorSpec>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(size_t index, const SafeBytesSink& sink)>& fill);

// The same file written a piece at a time, in any order: the header (as write_safetensors
// writes it) goes out at construction, then write() puts bytes at an offset inside one
// tensor's data (seek + write), and commit() checks that every tensor got exactly its size in
// all and renames the file into place. A writer destroyed without commit leaves the target
// untouched.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, const std::vector<SafeTensorSpec>& tensors,
                    const std::map<std::string, std::string>& metadata);
  void write(size_t tensor, uint64_t offset, const void* data, size_t bytes);
  void commit();

 private:
  AtomicFile file_;
  std::vector<std::string> names_;
  std::vector<uint64_t> begin_, size_, written_;  // per tensor: bytes of the data area
  uint64_t data_start_ = 0;                        // 8 + the header's length
};

// Whether the file at path starts as a safetensors file does (an 8-byte length, then '{'):
// for readers that take either their own format or this one. False when it cannot be read.
bool is_safetensors_file(const std::string& path);

// IEEE half to float (exact).
float f16_to_float(uint16_t h);

}  // namespace rz
