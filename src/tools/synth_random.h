// The seeded random weights of the synthetic-model writers (tools/synth.h,
// tools/synth_mmproj.h): one generator, so a seed means the same draws in both.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda::synth_random {

// xoshiro256** — small, fast, seedable; uniform floats in [-1, 1) scaled to unit
// variance (sqrt(3)) are as good as normals for a speed/correctness model.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
    for (auto& s : s_) {
      x += 0x9E3779B97F4A7C15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  float uniform() { return static_cast<float>((next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// v drawn uniform with standard deviation `stddev`.
inline void fill(Rng& rng, std::vector<float>& v, float stddev) {
  const float a = stddev * 1.7320508f;  // uniform[-a, a) has this stddev
  for (float& x : v) x = rng.uniform() * a;
}

// Norm weights: 1 with a seeded +-0.1 jitter (a swapped norm tensor shows in tests).
inline std::vector<float> norm_weights(Rng& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = 1.0f + 0.1f * rng.uniform();
  return v;
}

}  // namespace pagoda::synth_random
