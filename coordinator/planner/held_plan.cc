#include "coordinator/planner/held_plan.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ballast/ownership.h"
#include "coordinator/planner/ownership.h"

namespace ballast::coordinator {
namespace {

// round(fraction * units), halves up, with a nudge so that 0.3 * 10 is 3.
int32_t FractionOf(double fraction, int32_t units) {
  return static_cast<int32_t>(std::floor(fraction * units + 0.5 + 1e-9));
}

// `total` spread over the ranks that may take units (not `rank`, not cordoned), as evenly
// as whole units allow, the lower ranks taking the remainder.
std::vector<int32_t> Spread(int32_t total, int32_t rank, const std::vector<bool>& cordoned) {
  std::vector<int32_t> share(cordoned.size(), 0);
  std::vector<size_t> takers;
  for (size_t r = 0; r < cordoned.size(); ++r) {
    if (static_cast<int32_t>(r) != rank && !cordoned[r]) takers.push_back(r);
  }
  if (takers.empty()) return share;
  const int32_t n = static_cast<int32_t>(takers.size());
  for (int32_t i = 0; i < n; ++i) share[takers[i]] = total / n + (i < total % n ? 1 : 0);
  return share;
}

}  // namespace

absl::StatusOr<BlockPlan> HeldBlockPlan(const GroupHold& hold, const BlockShape& shape,
                                        const std::vector<bool>& cordoned,
                                        const BlockPlan* in_force) {
  const int32_t size = static_cast<int32_t>(cordoned.size());
  if (absl::Status s = ValidateHold(hold, size); !s.ok()) return s;
  const std::vector<RankId> even = EvenOwnership(shape.num_units, size);
  std::vector<int32_t> counts(size, 0);
  for (RankId r : even) ++counts[r.value()];
  const int32_t resharded = FractionOf(hold.reshard_fraction, counts[hold.rank]);
  const std::vector<int32_t> gained = Spread(resharded, hold.rank, cordoned);
  int32_t handed = 0;
  for (int32_t r = 0; r < size; ++r) {
    counts[r] += gained[r];
    handed += gained[r];
  }
  const int32_t kept = counts[hold.rank] - resharded;
  const int32_t offloaded = FractionOf(hold.offload_fraction, kept);
  const std::vector<int32_t> helped = Spread(offloaded, hold.rank, cordoned);
  int32_t helping = 0;
  for (int32_t h : helped) helping += h;
  if (handed < resharded || helping < offloaded) {
    return absl::FailedPreconditionError(absl::StrCat("hold: block ", shape.block.value(),
                                                      ": every rank but ", hold.rank,
                                                      " is cordoned, so none can take its units"));
  }
  counts[hold.rank] = kept;

  BlockPlan plan;
  plan.block = shape.block;
  std::vector<RankId> owners = MoveUnits(even, counts);
  // Stated whenever it is not the even split (so the plan reads the same after the workers
  // moved, and after a coordinator restart that forgot the plan in force), and while the
  // workers still have to move or the plan in force states one.
  if (owners != even || owners != shape.owner_of_unit ||
      (in_force != nullptr && !in_force->owner_of_unit.empty())) {
    plan.owner_of_unit = std::move(owners);
  }
  for (int32_t r = 0; r < size; ++r) {
    if (helped[r] > 0) plan.offloads.push_back({RankId(hold.rank), RankId(r), helped[r]});
  }
  // The workers' own check, so a hold never pushes what they would refuse.
  if (absl::Status s = ValidateBlockPlan(plan, shape, size); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("hold: ", s.message()));
  }
  return plan;
}

}  // namespace ballast::coordinator
