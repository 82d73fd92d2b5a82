#include "ballast/ownership.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ballast {

absl::StatusOr<std::vector<RankId>> ProportionalOwnership(int32_t num_units,
                                                          absl::Span<const double> shares) {
  if (num_units <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_units ", num_units, " must be > 0"));
  }
  if (shares.empty()) return absl::InvalidArgumentError("shares is empty");
  double largest = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    if (!std::isfinite(shares[r]) || shares[r] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shares[", r, "] = ", shares[r], " must be finite and > 0"));
    }
    largest = std::max(largest, shares[r]);
  }
  // Relative to the largest share, so the total stays finite whatever the shares' scale
  // (1.5e308 twice would sum to infinity and every quota to NaN).
  double total = 0;
  for (double share : shares) total += share / largest;
  // Largest-remainder rounding: floor every quota, then hand the leftover units to the
  // largest fractional parts (ties to the lower rank), so the counts sum exactly.
  const size_t p = shares.size();
  std::vector<int32_t> counts(p);
  std::vector<std::pair<double, size_t>> remainders(p);
  int32_t assigned = 0;
  for (size_t r = 0; r < p; ++r) {
    const double quota = num_units * (shares[r] / largest) / total;
    counts[r] = static_cast<int32_t>(std::floor(quota));
    remainders[r] = {quota - counts[r], r};
    assigned += counts[r];
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // Fewer than p units are left over (each floor lost less than one); the bound on i is
  // only a guard against rounding.
  for (size_t i = 0; assigned < num_units; i = (i + 1) % p, ++assigned) {
    ++counts[remainders[i].second];
  }
  std::vector<RankId> owners;
  owners.reserve(num_units);
  for (size_t r = 0; r < p; ++r) owners.insert(owners.end(), counts[r], RankId(r));
  return owners;
}

std::vector<RankId> EvenOwnership(int32_t num_units, int32_t size) {
  if (num_units <= 0 || size <= 0) return {};
  std::vector<double> shares(size, 1.0);
  auto owners = ProportionalOwnership(num_units, shares);
  return owners.ok() ? *std::move(owners) : std::vector<RankId>();
}

}  // namespace ballast
