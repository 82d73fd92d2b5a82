// The median of a small buffer, in place: the speed model's window and its per-count
// block times (coordinator/unit_count_fit.h) both take medians of a few numbers on every
// report, without allocating.
#ifndef BALLAST_COMMON_MEDIAN_H_
#define BALLAST_COMMON_MEDIAN_H_

#include <algorithm>

namespace ballast {

// Median of values[0, n), n > 0, reordering them. For an even n, the mean of the two
// middle values.
template <typename T>
double MedianInPlace(T* values, int n) {
  T* mid = values + n / 2;
  std::nth_element(values, mid, values + n);
  if (n % 2 == 1) return static_cast<double>(*mid);
  return (static_cast<double>(*mid) + static_cast<double>(*std::max_element(values, mid))) / 2;
}

}  // namespace ballast

#endif  // BALLAST_COMMON_MEDIAN_H_
