// Ownership of a block's units: the water-filled counts a reshard aims at (halfway, for a
// refinement of a split already uneven), and the unit moves that reach them. Part of the
// planner library; pure functions.
#ifndef BALLAST_COORDINATOR_PLANNER_OWNERSHIP_H_
#define BALLAST_COORDINATOR_PLANNER_OWNERSHIP_H_

#include <cstdint>
#include <vector>

#include "ballast/types.h"
#include "coordinator/planner/vocabulary.h"

namespace ballast::coordinator {

// Unit counts minimising max_r f_r + c_r * n'_r over the ranks given units, with
// sum n' = num_units and n' = 0 on cordoned ranks: units go one at a time to the rank with
// the least f_r + c_r * (n'_r + 1), ties to the lower rank, which is exactly optimal for
// this min-max. Trusts its input as PlanBlock checked it (ValidatePlannerRanks: c_r finite
// and > 0, f_r finite and >= 0, some rank not cordoned; num_units >= 0); with no rank to
// give units to, the counts come back short.
std::vector<int32_t> WaterFillCounts(const std::vector<PlannerRank>& ranks, int32_t num_units);

// Counts halfway from `from` to `to` (same ranks, same total): each rank moves half its
// way, rounded towards `from`; the units this leaves over (half the odd moves' remainders)
// go to the ranks with an odd move in their direction, lowest rank first. A move of one
// unit each way is no move. A reshard refining a split already uneven goes only this far
// (PlanBlock): its target was estimated under the load the last move set. Counts of
// different sizes or totals are a caller's bug: `from` comes back unchanged.
std::vector<int32_t> HalfwayCounts(const std::vector<int32_t>& from,
                                   const std::vector<int32_t>& to);

// The owner of every unit after moving as few units as possible to reach `new_counts`:
// each rank keeps min(old, new) of its units, lowest unit ids first; freed units, lowest
// id first, go to the ranks that need more, in rank order.
std::vector<RankId> MoveUnits(const std::vector<RankId>& owner_of_unit,
                              const std::vector<int32_t>& new_counts);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_OWNERSHIP_H_
