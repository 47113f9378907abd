// train/tensorboard.cpp: the event file's framing and protobuf fields (see tensorboard.h).
#include "train/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file.h"

namespace rz {

namespace {

// CRC32C (Castagnoli, reflected polynomial 0x82f63b78), one table lookup per byte.
const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf's encodings: a varint, a field's key (number << 3 | wire type), little-endian
// fixed-width values, and a length-delimited field.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (uint64_t(field) << 3) | wire); }
template <typename T>
void put_le(std::string& out, T v) {  // the host is little-endian (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event's fields 1 and 2; the step left out at 0 (proto3's default).
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_le(e, wall_time);
  if (step != 0) {
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || h[0] == '\0') return "localhost";
  std::string s = h;
  for (char& c : s)
    if (c == '/' || static_cast<unsigned char>(c) < 0x20) c = '_';  // stays one file name
  return s;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto& t = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  put_le(r, static_cast<uint64_t>(data.size()));
  put_le(r, masked_crc32c(r.data(), 8));
  r += data;
  put_le(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string event_file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalar(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_key(v, 2, kFixed32);
  put_le(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string event_session_start(double wall_time, int64_t step) {
  std::string log;  // SessionLog
  put_key(log, 1, kVarint);
  put_varint(log, 1);  // START
  std::string e = event_head(wall_time, step);
  put_bytes(e, 7, log);
  return e;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void TensorBoardWriter::open(const std::string& dir, int64_t resumed_step) {
  RZ_CHECK(f_ == nullptr, "tensorboard: %s is already open", path_.c_str());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  RZ_CHECK(!ec || std::filesystem::is_directory(dir), "tensorboard: cannot create the directory %s: %s", dir.c_str(),
           ec.message().c_str());
  const double t = now_seconds();
  const std::string stem = strfmt("%s/events.out.tfevents.%010lld.%s.%d.", dir.c_str(), static_cast<long long>(t),
                                  host_name().c_str(), static_cast<int>(::getpid()));
  int fd = -1;
  for (int n = 0; fd < 0; ++n) {
    path_ = stem + std::to_string(n);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    RZ_CHECK(fd >= 0 || (errno == EEXIST && n < 1000), "tensorboard: cannot create %s: %s", path_.c_str(),
             errno_string().c_str());
  }
  f_ = ::fdopen(fd, "wb");
  if (f_ == nullptr) ::close(fd);
  RZ_CHECK(f_ != nullptr, "tensorboard: cannot open %s: %s", path_.c_str(), errno_string().c_str());
  write(event_file_version(t));
  if (resumed_step >= 0) write(event_session_start(t, resumed_step + 1));
  flush();
}

void TensorBoardWriter::write(const std::string& event) {
  if (f_ == nullptr) return;
  const std::string r = tfrecord(event);
  RZ_CHECK(std::fwrite(r.data(), 1, r.size(), f_) == r.size(), "tensorboard: cannot write %s: %s", path_.c_str(),
           errno_string().c_str());
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  write(event_scalar(now_seconds(), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::record(const std::string& json_line) {
  if (f_ == nullptr) return;
  const nlohmann::json j = nlohmann::json::parse(json_line, nullptr, false);
  RZ_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer(),
           "tensorboard: a metrics record without an integer step: %.80s", json_line.c_str());
  const int64_t step = j["step"].get<int64_t>();
  const double t = now_seconds();
  auto walk = [&](auto&& self, const nlohmann::json& node, const std::string& tag) -> void {
    if (node.is_number()) write(event_scalar(t, step, tag, node.get<float>()));
    else if (node.is_boolean()) write(event_scalar(t, step, tag, node.get<bool>() ? 1.0f : 0.0f));
    else if (node.is_object())
      for (const auto& [key, value] : node.items()) self(self, value, tag + "/" + key);
  };
  for (const auto& [key, value] : j.items())
    if (key != "step") walk(walk, value, key);
}

void TensorBoardWriter::flush() {
  if (f_ == nullptr) return;
  RZ_CHECK(std::fflush(f_) == 0, "tensorboard: cannot write %s: %s", path_.c_str(), errno_string().c_str());
}

}  // namespace rz
