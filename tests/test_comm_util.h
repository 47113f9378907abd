// tests/test_comm_util.h: known-answer inputs and checks shared by the comm tests.
//
// Rank r's input element i is value_of(r, i): a small integer, so every partial sum of up
// to 8 ranks is exact in fp32 and in bf16 (|sum| <= 88 < 256) and the reduction is known
// without communicating. The expected avg is the fp32 sum divided by N, rounded once.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/bf16.h"
#include "comm/communicator.h"

namespace rz::testing {

inline float value_of(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 23) - 11); }
inline float gather_value(size_t i) { return static_cast<float>(static_cast<int>(i % 241)); }

inline float expected_reduce(int nranks, size_t i, ReduceOp op, DType dt) {
  float sum = 0;
  for (int r = 0; r < nranks; ++r) sum += value_of(r, i);
  float v = op == ReduceOp::avg ? sum / static_cast<float>(nranks) : sum;
  return dt == DType::bf16 ? bf16_to_float(float_to_bf16(v)) : v;
}

// A typed byte buffer filled / read as floats.
struct Tensor {
  DType dt;
  std::vector<unsigned char> bytes;
  Tensor(DType d, size_t n) : dt(d), bytes(n * dtype_size(d) + 1) {}  // +1: never a null data()
  void* data() { return bytes.data(); }
  void set(size_t i, float v) {
    if (dt == DType::f32) std::memcpy(&bytes[i * 4], &v, 4);
    else { bf16 h = float_to_bf16(v); std::memcpy(&bytes[i * 2], &h, 2); }
  }
  float get(size_t i) const {
    if (dt == DType::f32) { float v; std::memcpy(&v, &bytes[i * 4], 4); return v; }
    bf16 h; std::memcpy(&h, &bytes[i * 2], 2); return bf16_to_float(h);
  }
};

// Runs fn(rank) on one thread per rank; returns each rank's error message ("" if none).
inline std::vector<std::string> run_ranks(int nranks, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> ts;
  for (int r = 0; r < nranks; ++r)
    ts.emplace_back([&, r] {
      try { fn(r); } catch (const std::exception& e) { errors[r] = e.what(); }
    });
  for (auto& t : ts) t.join();
  return errors;
}

// Bytes a rank sends in one ReduceScatter / AllGather phase: every chunk except the one
// it ends with (RS: its own, AG: its right neighbour's, which it never has to forward).
inline uint64_t rs_bytes_sent(size_t count, int N, int r, DType dt) {
  return N == 1 ? 0 : (count - shard_of(count, N, r).count) * dtype_size(dt);
}
inline uint64_t ag_bytes_sent(size_t count, int N, int r, DType dt) {
  return N == 1 ? 0 : (count - shard_of(count, N, (r + 1) % N).count) * dtype_size(dt);
}

inline std::vector<size_t> test_counts(int N) {
  std::vector<size_t> c = {0, 1, static_cast<size_t>(N - 1), static_cast<size_t>(N + 1), 1001};
  return c;
}

}  // namespace rz::testing
