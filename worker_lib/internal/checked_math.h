// Overflow-safe size arithmetic for validating caller-supplied shapes.
#ifndef BALLAST_WORKER_LIB_INTERNAL_CHECKED_MATH_H_
#define BALLAST_WORKER_LIB_INTERNAL_CHECKED_MATH_H_

#include <cstdint>
#include <initializer_list>
#include <limits>

namespace ballast::internal {

// True when the product of `factors` (all >= 0) is at most `limit`, computed without
// overflow: a shape from bad input must yield an error, never undefined behaviour.
inline bool ProductAtMost(std::initializer_list<int64_t> factors,
                          int64_t limit = std::numeric_limits<int32_t>::max()) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(product, f, &product) || product > limit) return false;
  }
  return true;
}

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_CHECKED_MATH_H_
