// train/tensorboard.h: TensorBoard event files (`train --tensorboard DIR`), written by hand.
//
// Why by hand: the format is two small things, and libprotobuf would be a dependency of
// the device build for them. An event file is a sequence of TFRecords,
//   uint64 length | uint32 masked CRC32C of those 8 bytes | data | uint32 masked CRC32C of data
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, CRC32C the Castagnoli
// polynomial), and each record's data is one serialized `Event` protobuf. Only these
// fields are written (field number, protobuf wire type):
//   Event          wall_time 1 (double), step 2 (varint), file_version 3 (string),
//                  summary 5 (message), session_log 7 (message)
//   Summary        value 1 (message)
//   Summary.Value  tag 1 (string), simple_value 2 (float)
//   SessionLog     status 1 (varint; START = 1)
// The file opens with an Event holding only wall_time and file_version "brain.Event:2".
// As protobuf's own serializer does (proto3), a step of 0 is left out, and simple_value,
// a member of a oneof, is always written: for the same values the bytes are protobuf's
// (tests/fixtures/tensorboard holds what PyPI's tensorboard writes; the test compares).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rz {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The record framing of `data`.
std::string tfrecord(const std::string& data);
// Serialized Events (unframed).
std::string event_file_version(double wall_time);
std::string event_scalar(double wall_time, int64_t step, const std::string& tag, float value);
std::string event_session_start(double wall_time, int64_t step);

// One run's event file, written by rank 0.
class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Creates dir (and its parents) and a new event file in it, named as TensorBoard's own
  // writer names them, events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>.<n>;
  // never an existing file (created exclusively; n counts up past a clash). resumed_step
  // >= 0: the run resumed after that step, and a session-start event at the next step
  // tells TensorBoard to drop what earlier files of this directory recorded from there on
  // (a resumed run repeats those steps).
  void open(const std::string& dir, int64_t resumed_step = -1);
  bool is_open() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }

  void scalar(const std::string& tag, int64_t step, double value);
  // Every value of one metrics JSONL record (train/metrics.h's metrics_json_line) as a
  // scalar at the record's "step": numbers under their key ("loss", "val_loss", "lr", ...),
  // nested objects as "outer/inner" ("mem_peak_bytes/params"), true as 1; nulls (a
  // non-finite value) are left out. Whatever the record gains, TensorBoard gets.
  void record(const std::string& json_line);
  // Writes the buffered records out, so a TensorBoard watching the directory sees them.
  void flush();

 private:
  void write(const std::string& event);
  FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace rz
