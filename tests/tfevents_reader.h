// tests/tfevents_reader.h: a reader of TensorBoard event files for the tests (and its fuzz
// target, fuzz/fuzz_tfevents.cpp), independent of the writer in train/tensorboard.cpp
// except for the CRC32C function (itself held to the standard check value by the test).
// Every record's two CRCs are checked; the Event protobuf is parsed field by field with
// every length bounded by the bytes left, so a damaged file is an error naming the record,
// never a read past the end. Fields it does not know are skipped by wire type, as
// protobuf does (TensorBoard's own writer adds source_metadata to its first event).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/check.h"
#include "train/tensorboard.h"

namespace rz::test {

struct TfValue {
  std::string tag;
  bool has_simple_value = false;
  float simple_value = 0;
};

struct TfEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<TfValue> values;  // the summary's
  int session_status = -1;      // SessionLog.status, -1 without a session_log
};

namespace tfevents_detail {

// A bounded view of bytes; every read checks what is left.
struct Cursor {
  const unsigned char* p;
  size_t left;
  size_t record;  // for the errors

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      RZ_CHECK(left > 0, "event record %zu: a varint runs past its end", record);
      const unsigned char b = *p++;
      --left;
      v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    RZ_FAIL("event record %zu: a varint longer than 10 bytes", record);
  }
  template <typename T>
  T fixed() {
    RZ_CHECK(left >= sizeof(T), "event record %zu: a %zu-byte field runs past its end", record, sizeof(T));
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    left -= sizeof(T);
    return v;
  }
  Cursor sub() {  // a length-delimited field's bytes
    const uint64_t n = varint();
    RZ_CHECK(n <= left, "event record %zu: a field of %llu bytes with %zu left", record,
             static_cast<unsigned long long>(n), left);
    Cursor c{p, size_t(n), record};
    p += n;
    left -= size_t(n);
    return c;
  }
  std::string bytes() {
    Cursor c = sub();
    return std::string(reinterpret_cast<const char*>(c.p), c.left);
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1: fixed<uint64_t>(); return;
      case 2: sub(); return;
      case 5: fixed<uint32_t>(); return;
      default: RZ_FAIL("event record %zu: wire type %u (groups or garbage)", record, wire);
    }
  }
  // Walks the fields: f(field number, wire type, *this) reads or skips each one.
  template <typename F>
  void fields(F&& f) {
    while (left > 0) {
      const uint64_t key = varint();
      const uint32_t wire = uint32_t(key & 7);
      const uint64_t field = key >> 3;
      RZ_CHECK(field >= 1 && field <= 0x1fffffff, "event record %zu: field number %llu", record,
               static_cast<unsigned long long>(field));
      f(uint32_t(field), wire, *this);
    }
  }
  void expect(uint32_t wire, uint32_t want, const char* what) {
    RZ_CHECK(wire == want, "event record %zu: %s has wire type %u, expected %u", record, what, wire, want);
  }
};

inline TfValue parse_value(Cursor c) {
  TfValue v;
  c.fields([&](uint32_t field, uint32_t wire, Cursor& in) {
    if (field == 1) {
      in.expect(wire, 2, "Summary.Value.tag");
      v.tag = in.bytes();
    } else if (field == 2) {
      in.expect(wire, 5, "Summary.Value.simple_value");
      v.simple_value = in.fixed<float>();
      v.has_simple_value = true;
    } else {
      in.skip(wire);
    }
  });
  return v;
}

inline TfEvent parse_event(Cursor c) {
  TfEvent e;
  c.fields([&](uint32_t field, uint32_t wire, Cursor& in) {
    if (field == 1) {
      in.expect(wire, 1, "Event.wall_time");
      e.wall_time = in.fixed<double>();
    } else if (field == 2) {
      in.expect(wire, 0, "Event.step");
      e.step = int64_t(in.varint());
    } else if (field == 3) {
      in.expect(wire, 2, "Event.file_version");
      e.file_version = in.bytes();
    } else if (field == 5) {
      in.expect(wire, 2, "Event.summary");
      in.sub().fields([&](uint32_t f, uint32_t w, Cursor& s) {
        if (f != 1) return s.skip(w);
        s.expect(w, 2, "Summary.value");
        e.values.push_back(parse_value(s.sub()));
      });
    } else if (field == 7) {
      in.expect(wire, 2, "Event.session_log");
      e.session_status = 0;
      in.sub().fields([&](uint32_t f, uint32_t w, Cursor& s) {
        if (f != 1) return s.skip(w);
        s.expect(w, 0, "SessionLog.status");
        e.session_status = int(s.varint());
      });
    } else {
      in.skip(wire);
    }
  });
  return e;
}

}  // namespace tfevents_detail

// The events of a whole file's bytes; throws rz::Error naming the record (counted from 0)
// at the first bad CRC, truncation or malformed field.
inline std::vector<TfEvent> read_tfevents(const std::string& bytes) {
  std::vector<TfEvent> out;
  size_t at = 0;
  for (size_t record = 0; at < bytes.size(); ++record) {
    RZ_CHECK(bytes.size() - at >= 12, "event record %zu: a header of %zu bytes, expected 12", record,
             bytes.size() - at);
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    RZ_CHECK(len_crc == masked_crc32c(bytes.data() + at, 8), "event record %zu: the length's CRC does not match",
             record);
    at += 12;
    RZ_CHECK(len <= bytes.size() - at && bytes.size() - at - len >= 4,
             "event record %zu: %llu bytes of data and its CRC, but only %zu left", record,
             static_cast<unsigned long long>(len), bytes.size() - at);
    uint32_t data_crc;
    std::memcpy(&data_crc, bytes.data() + at + len, 4);
    RZ_CHECK(data_crc == masked_crc32c(bytes.data() + at, size_t(len)), "event record %zu: the data's CRC does not match",
             record);
    out.push_back(tfevents_detail::parse_event(
        tfevents_detail::Cursor{reinterpret_cast<const unsigned char*>(bytes.data()) + at, size_t(len), record}));
    at += size_t(len) + 4;
  }
  return out;
}

}  // namespace rz::test
