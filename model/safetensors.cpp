// model/safetensors.cpp: the safetensors reader and writer (see safetensors.h).
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/bf16.h"
#include "base/check.h"
#include "base/file.h"
#include "base/memory.h"
#include "model/json_input.h"

namespace rz {

namespace {

struct DTypeRow {
  SafeDType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {SafeDType::BOOL, "BOOL", 1},       {SafeDType::U8, "U8", 1},   {SafeDType::I8, "I8", 1},
    {SafeDType::F8_E5M2, "F8_E5M2", 1}, {SafeDType::F8_E4M3, "F8_E4M3", 1}, {SafeDType::F8_E8M0, "F8_E8M0", 1},
    {SafeDType::I16, "I16", 2},         {SafeDType::U16, "U16", 2}, {SafeDType::F16, "F16", 2},
    {SafeDType::BF16, "BF16", 2},       {SafeDType::I32, "I32", 4}, {SafeDType::U32, "U32", 4},
    {SafeDType::F32, "F32", 4},         {SafeDType::I64, "I64", 8}, {SafeDType::U64, "U64", 8},
    {SafeDType::F64, "F64", 8},
};

const DTypeRow& row_of(SafeDType d) {
  for (const DTypeRow& r : kDTypes)
    if (r.dtype == d) return r;
  RZ_FAIL("safetensors: dtype %d has no row", static_cast<int>(d));
}

// A tensor's shape is at most this many dimensions (the model's have 1 or 2; old GPT-2 files'
// attention masks 4). Far above any real file, and keeps a hostile shape small.
constexpr size_t kMaxRank = 16;
// JSON containers nest at most this deep: the header object, a tensor's object, its arrays.
constexpr int kMaxDepth = 3;

using json = nlohmann::json;

uint64_t as_count(const json& v, const std::string& path, const std::string& name, const char* field) {
  RZ_CHECK(v.is_number_unsigned(), "safetensors file %s: tensor '%s': %s holds %s, expected a non-negative integer",
           path.c_str(), printable_name(name).c_str(), field, printable_name(v.dump().substr(0, 40)).c_str());
  return v.get<uint64_t>();
}

SafeTensorInfo parse_entry(const std::string& name, const json& e, const std::string& path) {
  const char* p = path.c_str();
  const std::string shown = printable_name(name);
  const char* n = shown.c_str();
  RZ_CHECK(e.is_object(), "safetensors file %s: tensor '%s': expected an object with dtype, shape and data_offsets",
           p, n);
  for (const auto& [k, v] : e.items())
    RZ_CHECK(k == "dtype" || k == "shape" || k == "data_offsets",
             "safetensors file %s: tensor '%s': unknown field '%s' (expected dtype, shape and data_offsets)", p, n,
             printable_name(k).c_str());
  for (const char* f : {"dtype", "shape", "data_offsets"})
    RZ_CHECK(e.contains(f), "safetensors file %s: tensor '%s': no %s", p, n, f);
  SafeTensorInfo t;
  t.name = name;
  const json& d = e["dtype"];
  RZ_CHECK(d.is_string(), "safetensors file %s: tensor '%s': dtype is not a string", p, n);
  const std::string dn = d.get<std::string>();
  bool known = false;
  for (const DTypeRow& r : kDTypes)
    if (dn == r.name) {
      t.dtype = r.dtype;
      known = true;
    }
  RZ_CHECK(known, "safetensors file %s: tensor '%s': unknown dtype '%s'", p, n, printable_name(dn.substr(0, 40)).c_str());
  const json& s = e["shape"];
  RZ_CHECK(s.is_array(), "safetensors file %s: tensor '%s': shape is not an array", p, n);
  RZ_CHECK(s.size() <= kMaxRank, "safetensors file %s: tensor '%s': shape has %zu dimensions, at most %zu", p, n,
           s.size(), kMaxRank);
  t.numel = 1;
  bool overflow = false;
  for (const json& dim : s) {
    t.shape.push_back(as_count(dim, path, name, "shape"));
    overflow = overflow || __builtin_mul_overflow(t.numel, t.shape.back(), &t.numel);
  }
  uint64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(t.numel, static_cast<uint64_t>(row_of(t.dtype).size), &bytes);
  RZ_CHECK(!overflow, "safetensors file %s: tensor '%s': shape %s of %s does not fit in 64 bits of bytes", p, n,
           shape_text(t.shape).c_str(), dn.c_str());
  const json& o = e["data_offsets"];
  RZ_CHECK(o.is_array() && o.size() == 2, "safetensors file %s: tensor '%s': data_offsets is not [begin, end]", p, n);
  t.begin = as_count(o[0], path, name, "data_offsets");
  t.end = as_count(o[1], path, name, "data_offsets");
  RZ_CHECK(t.begin <= t.end, "safetensors file %s: tensor '%s': data_offsets [%llu, %llu] end before they begin", p,
           n, static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(t.end));
  RZ_CHECK(t.end - t.begin == bytes,
           "safetensors file %s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but dtype %s and shape %s "
           "need %llu", p, n, static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(t.end),
           static_cast<unsigned long long>(t.end - t.begin), dn.c_str(), shape_text(t.shape).c_str(),
           static_cast<unsigned long long>(bytes));
  return t;
}

void pread_exact(int fd, void* out, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    RZ_CHECK(r > 0, "safetensors file %s: read failed at byte %llu: %s", path.c_str(),
             static_cast<unsigned long long>(offset), r < 0 ? errno_string().c_str() : "the file is shorter now");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

const char* safe_dtype_name(SafeDType d) { return row_of(d).name; }
size_t safe_dtype_size(SafeDType d) { return row_of(d).size; }
bool safe_dtype_is_float(SafeDType d) { return d == SafeDType::F32 || d == SafeDType::F16 || d == SafeDType::BF16; }

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string printable_name(std::string_view name) {
  std::string s;
  for (unsigned char c : name) {
    if (s.size() >= 120) return s + "...";
    if (c >= 0x20 && c < 0x7f && c != '\\') s += static_cast<char>(c);
    else s += strfmt("\\x%02x", c);
  }
  return s;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant x 2^-24, exact in fp32
    const float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  const uint32_t u = exp == 31 ? sign | 0x7f800000u | (mant << 13)  // inf, NaN (payload kept)
                               : sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t data_bytes, const std::string& path) {
  const char* p = path.c_str();
  RZ_CHECK(!text.empty() && text[0] == '{', "safetensors file %s: header does not start with '{' (not a safetensors file?)", p);
  const json h = parse_untrusted_json(text, kMaxDepth, "safetensors file", path);
  RZ_CHECK(h.is_object(), "safetensors file %s: header is not a JSON object", p);
  SafetensorsHeader out;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      RZ_CHECK(e.is_object(), "safetensors file %s: __metadata__ is not an object of strings", p);
      for (const auto& [k, v] : e.items()) {
        RZ_CHECK(v.is_string(), "safetensors file %s: __metadata__ '%s' is not a string", p, printable_name(k).c_str());
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(name, e, path));
  }
  // The tensors tile [0, data_bytes): sorted by offset, each begins where the last ended.
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const SafeTensorInfo& a, const SafeTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const SafeTensorInfo* prev = nullptr;
  for (const SafeTensorInfo& t : out.tensors) {
    RZ_CHECK(t.end <= data_bytes, "safetensors file %s: tensor '%s': data_offsets end at %llu, past the %llu-byte data area",
             p, printable_name(t.name).c_str(), static_cast<unsigned long long>(t.end), static_cast<unsigned long long>(data_bytes));
    RZ_CHECK(t.begin >= at, "safetensors file %s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' (ending at %llu)",
             p, printable_name(t.name).c_str(), static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(t.end),
             prev ? printable_name(prev->name).c_str() : "?", static_cast<unsigned long long>(at));
    RZ_CHECK(t.begin == at, "safetensors file %s: %llu bytes before tensor '%s' belong to no tensor", p,
             static_cast<unsigned long long>(t.begin - at), printable_name(t.name).c_str());
    at = t.end;
    prev = &t;
  }
  RZ_CHECK(at == data_bytes, "safetensors file %s: the last %llu bytes of the data area belong to no tensor", p,
           static_cast<unsigned long long>(data_bytes - at));
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const char* p = path.c_str();
  fd_ = open_input_file(path, "safetensors file");
  try {
    struct stat st {};
    RZ_SYSCHECK(::fstat(fd_, &st), "safetensors file %s: cannot stat", p);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    RZ_CHECK(size >= 8, "safetensors file %s: %llu bytes, shorter than the 8-byte header length", p,
             static_cast<unsigned long long>(size));
    unsigned char len_bytes[8];
    pread_exact(fd_, len_bytes, 8, 0, path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
    RZ_CHECK(n <= kSafetensorsMaxHeader, "safetensors file %s: header length %llu is more than the format's %llu bytes",
             p, static_cast<unsigned long long>(n), static_cast<unsigned long long>(kSafetensorsMaxHeader));
    RZ_CHECK(n <= size - 8, "safetensors file %s: header length %llu, but only %llu bytes follow it", p,
             static_cast<unsigned long long>(n), static_cast<unsigned long long>(size - 8));
    std::string text;
    resize_or_fail(text, static_cast<size_t>(n), "the safetensors header");
    pread_exact(fd_, text.data(), text.size(), 8, path);
    data_start_ = 8 + n;
    header_ = parse_safetensors_header(text, size - data_start_, path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), data_start_(o.data_start_), header_(std::move(o.header_)) {
  o.fd_ = -1;
}

const SafeTensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const SafeTensorInfo& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read_bytes(const SafeTensorInfo& t, uint64_t offset, size_t n, void* out) const {
  RZ_CHECK(offset <= t.end - t.begin && n <= t.end - t.begin - offset,
           "safetensors file %s: tensor '%s': bytes [%llu, +%zu) are outside its %llu", path_.c_str(), printable_name(t.name).c_str(),
           static_cast<unsigned long long>(offset), n, static_cast<unsigned long long>(t.end - t.begin));
  pread_exact(fd_, out, n, data_start_ + t.begin + offset, path_);
}

void SafetensorsFile::read_f32(const SafeTensorInfo& t, uint64_t first, size_t n, float* out) const {
  RZ_CHECK(safe_dtype_is_float(t.dtype), "safetensors file %s: tensor '%s' is %s; ringzero reads F32, F16 or BF16",
           path_.c_str(), printable_name(t.name).c_str(), safe_dtype_name(t.dtype));
  RZ_CHECK(first <= t.numel && n <= t.numel - first, "safetensors file %s: tensor '%s': elements [%llu, +%zu) outside its %llu",
           path_.c_str(), printable_name(t.name).c_str(), static_cast<unsigned long long>(first), n,
           static_cast<unsigned long long>(t.numel));
  const size_t esize = safe_dtype_size(t.dtype);
  if (t.dtype == SafeDType::F32) {  // the bytes are the floats (little-endian host)
    read_bytes(t, first * 4, n * 4, out);
    return;
  }
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<uint16_t> raw(std::min(n, kChunk));
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t k = std::min(kChunk, n - at);
    read_bytes(t, (first + at) * esize, k * esize, raw.data());
    if (t.dtype == SafeDType::F16)
      for (size_t i = 0; i < k; ++i) out[at + i] = f16_to_float(raw[i]);
    else
      for (size_t i = 0; i < k; ++i) out[at + i] = bf16_to_float(bf16{raw[i]});
  }
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<SafeTensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : file_(path) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t at = 0;
  for (const SafeTensorSpec& t : tensors) {
    RZ_CHECK(t.name != "__metadata__" && !h.contains(t.name), "%s: tensor name '%s' is reserved or given twice",
             path.c_str(), t.name.c_str());
    uint64_t bytes = safe_dtype_size(t.dtype);
    for (uint64_t d : t.shape)
      RZ_CHECK(!__builtin_mul_overflow(bytes, d, &bytes), "%s: tensor '%s' is too large", path.c_str(), t.name.c_str());
    h[t.name] = {{"dtype", safe_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    names_.push_back(t.name);
    begin_.push_back(at);
    size_.push_back(bytes);
    at += bytes;
  }
  written_.assign(tensors.size(), 0);
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data area starts 8-aligned
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  file_.write(len, 8);
  file_.write(text.data(), text.size());
  data_start_ = 8 + text.size();
}

void SafetensorsWriter::write(size_t tensor, uint64_t offset, const void* data, size_t bytes) {
  RZ_CHECK(tensor < size_.size() && offset <= size_[tensor] && bytes <= size_[tensor] - offset &&
               bytes <= size_[tensor] - written_[tensor],
           "%s: tensor '%s' got more than its %llu bytes", file_.path().c_str(),
           tensor < names_.size() ? names_[tensor].c_str() : "?",
           static_cast<unsigned long long>(tensor < size_.size() ? size_[tensor] : 0));
  file_.seek(static_cast<size_t>(data_start_ + begin_[tensor] + offset));
  file_.write(data, bytes);
  written_[tensor] += bytes;
}

void SafetensorsWriter::commit() {
  for (size_t i = 0; i < size_.size(); ++i)
    RZ_CHECK(written_[i] == size_[i], "%s: tensor '%s' got %llu of its %llu bytes", file_.path().c_str(),
             names_[i].c_str(), static_cast<unsigned long long>(written_[i]), static_cast<unsigned long long>(size_[i]));
  file_.commit();
}

bool is_safetensors_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char head[9] = {};
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, head, 9, 0) == 9 && head[8] == '{';
  ::close(fd);
  return ok;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorSpec>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(size_t index, const SafeBytesSink& sink)>& fill) {
  SafetensorsWriter w(path, tensors, metadata);
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t at = 0;
    fill(i, [&](const void* data, size_t bytes) {
      w.write(i, at, data, bytes);
      at += bytes;
    });
  }
  w.commit();
}

}  // namespace rz
