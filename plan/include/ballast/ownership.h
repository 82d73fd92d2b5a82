// Initial ownership of a block's units: which rank holds each unit before any reshard.
// Part of the plan library, since a plan's owner_of_unit and a block's starting split
// speak the same language; where units move during training is the planner's business
// (coordinator/planner/ownership.h).
#ifndef BALLAST_OWNERSHIP_H_
#define BALLAST_OWNERSHIP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ballast/types.h"

namespace ballast {

// Contiguous ownership with per-rank shares (HAP-style uneven sharding): rank r gets about
// shares[r] / sum(shares) of the units, rounded by largest remainder; every share > 0.
absl::StatusOr<std::vector<RankId>> ProportionalOwnership(int32_t num_units,
                                                          absl::Span<const double> shares);
// The equal split (Megatron's).
std::vector<RankId> EvenOwnership(int32_t num_units, int32_t size);

}  // namespace ballast

#endif  // BALLAST_OWNERSHIP_H_
