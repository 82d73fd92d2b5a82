// Deterministic parameter initialisation shared by the blocks: every rank draws the same
// values for the same (seed, block), so ranks initialise their shards without talking.
#ifndef BALLAST_WORKER_LIB_INTERNAL_INIT_H_
#define BALLAST_WORKER_LIB_INTERNAL_INIT_H_

#include <cmath>
#include <cstdint>
#include <random>

namespace ballast::internal {

// Fills [first, first + n) with N(0, stddev) drawn from a stream keyed by (seed, block, tag).
inline void FillNormal(float* first, size_t n, float stddev, uint64_t seed, int32_t block,
                       uint64_t tag) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(block), static_cast<uint32_t>(tag)};
  std::mt19937_64 rng(seq);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (size_t i = 0; i < n; ++i) first[i] = dist(rng);
}

// Xavier/Glorot normal standard deviation.
inline float XavierStd(int64_t fan_in, int64_t fan_out) {
  return std::sqrt(2.0f / static_cast<float>(fan_in + fan_out));
}

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_INIT_H_
