#include "coordinator/planner/plan_flaps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {
namespace {

// Whether a plan moves work between ranks: offloads, replicas or prunes in some block. A
// capacity cap, or the ownership a reshard left, is no balancing: a group running them
// runs all-local.
bool Balances(const std::vector<BlockPlan>& blocks) {
  return std::any_of(blocks.begin(), blocks.end(), [](const BlockPlan& b) {
    return !b.offloads.empty() || !b.replicas.empty() ||
           std::any_of(b.pruned_units.begin(), b.pruned_units.end(),
                       [](int32_t n) { return n > 0; });
  });
}

}  // namespace

absl::Duration PlanFlaps::Hold(const DwellOptions& base) const {
  if (level_ == 0) return absl::ZeroDuration();
  return base.flap_hold * (int64_t{1} << (level_ - 1));
}

bool PlanFlaps::Pushed(const std::vector<BlockPlan>& blocks, bool moves_units, bool deliberate,
                       const DwellOptions& base, absl::Duration now) {
  const bool flap = !moves_units && !deliberate && base.flap_hold > absl::ZeroDuration() &&
                    before_.has_value() && *before_ == blocks &&
                    now - pushed_at_ < Hold(base) + base.flap_hold;
  if (flap) level_ = std::min(level_ + 1, kMaxDoublings + 1);
  before_ = std::move(in_force_);
  if (moves_units) before_.reset();
  in_force_ = blocks;
  pushed_at_ = now;
  quiet_since_ = now;
  return flap;
}

DwellOptions PlanFlaps::Dwell(const DwellOptions& base, absl::Duration now) {
  if (base.flap_hold <= absl::ZeroDuration()) {
    level_ = 0;
    return base;
  }
  // Each hold that passes twice over without a change halves it.
  while (level_ > 0 && now - quiet_since_ >= 2 * Hold(base)) {
    quiet_since_ += 2 * Hold(base);
    --level_;
  }
  DwellOptions dwell = base;
  if (in_force_.has_value() && Balances(*in_force_)) {
    dwell.plan_dwell = std::max(base.plan_dwell, Hold(base));
  }
  return dwell;
}

std::string PlanFlaps::Describe(const DwellOptions& base) const {
  if (level_ == 0) return "";
  return absl::StrCat("plans undone soon after they changed: ", level_,
                      level_ == 1 ? " flap" : " flaps",
                      " counted, so a change of a plan that balances is held ",
                      absl::FormatDuration(Hold(base)), " by hysteresis ", base.dwell_hysteresis);
}

}  // namespace ballast::coordinator
