#include "coordinator/unit_count_fit.h"

#include <algorithm>
#include <cmath>

#include "common/median.h"

namespace ballast::coordinator {

void UnitCountTimes::Add(int64_t units, double seconds) {
  if (units <= 0) return;
  Count* slot = nullptr;
  for (Count& c : counts_) {
    if (c.units == units) slot = &c;
  }
  if (slot == nullptr) {
    // A free slot (units 0, last_use 0) is the least recently used of all.
    slot = &*std::min_element(counts_.begin(), counts_.end(), [](const Count& a, const Count& b) {
      return a.last_use < b.last_use;
    });
    *slot = Count{.units = units};
  }
  slot->last_use = ++uses_;
  slot->seconds[slot->next] = static_cast<float>(seconds);
  slot->next = static_cast<int8_t>((slot->next + 1) % kSamplesPerCount);
  slot->size = static_cast<int8_t>(std::min(slot->size + 1, kSamplesPerCount));
}

void UnitCountTimes::Clear() {
  counts_ = {};
  uses_ = 0;
}

std::optional<AffineTime> UnitCountTimes::Fit(bool in_use) const {
  // Each count's median and its standard error, from the samples' MAD (x 1.4826 for a
  // standard deviation, x 1.2533 / sqrt(k) for a median's error over k samples), floored
  // at kNoiseFloor of the median: five samples can agree by chance.
  double n[kMaxCounts], t[kMaxCounts], se[kMaxCounts];
  int points = 0;
  for (const Count& c : counts_) {
    if (c.units <= 0 || c.size < kMinSamples || uses_ - c.last_use > kMaxAge) continue;
    std::array<float, kSamplesPerCount> v = c.seconds;
    const double median = MedianInPlace(v.data(), c.size);
    for (int i = 0; i < c.size; ++i) v[i] = static_cast<float>(std::abs(v[i] - median));
    const double mad = MedianInPlace(v.data(), c.size);
    const double sigma = std::max(1.4826 * mad, kNoiseFloor * median);
    n[points] = static_cast<double>(c.units);
    t[points] = median;
    se[points] = 1.2533 * sigma / std::sqrt(static_cast<double>(c.size));
    ++points;
  }
  if (points < 2) return std::nullopt;
  const double fewest = *std::min_element(n, n + points);
  const double most = *std::max_element(n, n + points);
  if (most < kMinSpan * fewest) return std::nullopt;
  double n_mean = 0, t_mean = 0;
  for (int i = 0; i < points; ++i) {
    n_mean += n[i] / points;
    t_mean += t[i] / points;
  }
  double sxx = 0, sxt = 0;
  for (int i = 0; i < points; ++i) {
    sxx += (n[i] - n_mean) * (n[i] - n_mean);
    sxt += (n[i] - n_mean) * (t[i] - t_mean);
  }
  const double slope = sxt / sxx;  // sxx > 0: the counts differ (span above)
  const double intercept = t_mean - slope * n_mean;
  // Both are weighted sums of the medians: their errors follow from the medians' errors.
  double slope_var = 0, intercept_var = 0;
  for (int i = 0; i < points; ++i) {
    const double ws = (n[i] - n_mean) / sxx;
    const double wi = 1.0 / points - n_mean * ws;
    slope_var += ws * ws * se[i] * se[i];
    intercept_var += wi * wi * se[i] * se[i];
  }
  const double significance = in_use ? kKeepSignificance : kSignificance;
  if (!std::isfinite(slope) || !std::isfinite(intercept) ||
      !(slope > significance * std::sqrt(slope_var)) ||
      !(intercept > significance * std::sqrt(intercept_var))) {
    return std::nullopt;
  }
  const double at_fewest = intercept + slope * fewest;
  if (!(intercept > kMinFixedShare * at_fewest) || !(intercept <= kMaxFixedShare * at_fewest)) {
    return std::nullopt;
  }
  return AffineTime{.fixed_seconds = intercept,
                    .seconds_per_unit = slope,
                    .counts = points,
                    .fewest_units = static_cast<int64_t>(fewest),
                    .most_units = static_cast<int64_t>(most)};
}

}  // namespace ballast::coordinator
