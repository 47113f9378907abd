// data/rng.h: the small deterministic PRNG the data pipeline draws from.
//
// std::shuffle and the std distributions are implementation-defined, so the same seed could
// give a different order with another standard library. These are fixed: splitmix64
// (Steele, Lea, Flood 2014) to expand a seed, xoshiro256** (Blackman, Vigna 2018) to draw,
// Lemire's multiply-and-reject to draw below a bound without bias.
#pragma once

#include <cstdint>

namespace rz {

inline uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Xoshiro256 {
 public:
  // Streams for different (seed, stream) pairs are independent for our purposes.
  Xoshiro256(uint64_t seed, uint64_t stream) {
    uint64_t x = seed;
    uint64_t mixed_seed = splitmix64(&x);
    x = mixed_seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (auto& w : s_) w = splitmix64(&x);
  }
  uint64_t next() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, bound), bound >= 1.
  uint64_t below(uint64_t bound) {
    __uint128_t m = static_cast<__uint128_t>(next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t v, int k) { return (v << k) | (v >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace rz
