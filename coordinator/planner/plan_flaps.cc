#include "coordinator/planner/plan_flaps.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
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

// Whether a plan balances by rank speed: offloads or prunes in some block. Experts'
// replicas follow their token loads, which calm speeds do not end, so they are no blip's.
bool BalancesBySpeed(const std::vector<BlockPlan>& blocks) {
  return std::any_of(blocks.begin(), blocks.end(), [](const BlockPlan& b) {
    return !b.offloads.empty() || std::any_of(b.pruned_units.begin(), b.pruned_units.end(),
                                              [](int32_t n) { return n > 0; });
  });
}

// `blocks` as they run on the ownership of the history they join: a history starts
// afresh at every move (PlanFlaps::Pushed), so the only ownership a plan in it states is
// that one (a reshard's own, stated until the group's next change: group_planner.h,
// WithoutMadeMove), and a plan that states it is the plan that does not. A reshard and
// the offloads undone after it are then a flap, as they were when a plan that only
// dropped the statement came between.
std::vector<BlockPlan> OnItsOwnership(const std::vector<BlockPlan>& blocks) {
  std::vector<BlockPlan> out;
  for (BlockPlan b : blocks) {
    b.owner_of_unit.clear();
    if (!RunsAllLocal(b, {})) out.push_back(std::move(b));
  }
  return out;
}

// Per (block, rank), the units of the rank's own work that each of three plans takes off
// it: those it prunes and offloads, less those of others it computes.
using Reliefs = std::map<std::pair<int32_t, int32_t>, std::array<int64_t, 3>>;

void AddRelief(const std::vector<BlockPlan>& blocks, size_t plan, Reliefs& reliefs) {
  for (const BlockPlan& b : blocks) {
    const int32_t id = b.block.value();
    for (size_t r = 0; r < b.pruned_units.size(); ++r) {
      reliefs[{id, static_cast<int32_t>(r)}][plan] += b.pruned_units[r];
    }
    for (const Offload& o : b.offloads) {
      reliefs[{id, o.owner.value()}][plan] += o.units;
      reliefs[{id, o.helper.value()}][plan] -= o.units;
    }
  }
}

// Whether `next` undoes some of the change from `before` to `in_force`: it restores
// `before`, or it balances and moves back the way that change moved it the work of some
// rank relieved in either (relieved of 3 units, then given 1 back: a partial undo is as
// much a sign of noise, and under a CPU quota the usual one, since a straggler relieved
// of work is throttled less and looks faster, so the next round hands some back). Only
// the relieved ranks count: helpers share out a growing offload differently from one
// plan to the next. On 2 ranks a straggler that moves to the other rank reads the same
// as such an undo and counts too (its plan then needs the dwell's hysteresis for a
// while; a straggler's first plan from all-local does not).
bool Undoes(const std::vector<BlockPlan>& before, const std::vector<BlockPlan>& in_force,
            const std::vector<BlockPlan>& next) {
  if (next == before) return true;
  // Ending the plan (calm, or a straggler's work all back home) undoes it only by
  // restoring the plan before: a calm group's blip is that, and calm ends a plan at once.
  if (!Balances(next)) return false;
  Reliefs reliefs;
  AddRelief(before, 0, reliefs);
  AddRelief(in_force, 1, reliefs);
  AddRelief(next, 2, reliefs);
  return std::any_of(reliefs.begin(), reliefs.end(), [](const auto& entry) {
    const std::array<int64_t, 3>& units = entry.second;
    if (units[0] <= 0 && units[1] <= 0) return false;  // a helper in both
    const int64_t first = units[1] - units[0], second = units[2] - units[1];
    return (first > 0 && second < 0) || (first < 0 && second > 0);
  });
}

}  // namespace

absl::Duration PlanFlaps::Hold(const DwellOptions& base) const {
  if (level_ == 0) return absl::ZeroDuration();
  return base.flap_hold * (int64_t{1} << (level_ - 1));
}

void PlanFlaps::Seed(const std::vector<BlockPlan>& in_force) {
  if (!in_force_.has_value()) in_force_ = OnItsOwnership(in_force);
}

bool PlanFlaps::Pushed(const std::vector<BlockPlan>& blocks, bool moves_units, bool deliberate,
                       const DwellOptions& base, absl::Duration now, bool calm) {
  std::vector<BlockPlan> run = OnItsOwnership(blocks);
  const absl::Duration window = Hold(base) + base.flap_hold;
  const bool may_flap = !moves_units && !deliberate && base.flap_hold > absl::ZeroDuration();
  bool flap = may_flap && before_.has_value() && Undoes(*before_, *in_force_, run) &&
              now - pushed_at_ < window;
  // Balancing by speed started (from a known plan that did not), or ended.
  const bool balanced = in_force_.has_value() && BalancesBySpeed(*in_force_);
  const bool balances = BalancesBySpeed(run);
  const bool starts = in_force_.has_value() && !balanced && balances;
  const bool ends = balanced && !balances;
  // A restart right after a blip that counted: the same noise, counted once.
  if (starts && ended_by_blip_) flap = false;
  // Calm ended balancing soon after it started: a blip.
  const bool lasted = balancing_since_.has_value() && now - *balancing_since_ >= window;
  const bool blip = may_flap && calm && ends && balancing_since_.has_value() && !lasted;
  flap = flap || blip;
  if (flap) level_ = std::min(level_ + 1, kMaxDoublings + 1);
  ended_by_blip_ = blip;
  // A straggler balanced for longer than a blip lasts, or a reshard (a straggler that
  // lasted, and another ownership): the blips before it no longer hold starts back.
  const bool still_blipped = blipped_ && !(ends && lasted) && !moves_units;
  // The longest blip since the blips last stopped holding starts back.
  if (blip) {
    longest_blip_ =
        std::max(still_blipped ? longest_blip_ : absl::ZeroDuration(), now - *balancing_since_);
  }
  blipped_ = still_blipped || blip;
  if (blip) last_blip_at_ = now;
  if (starts) balancing_since_ = now;
  if (!balances || moves_units) balancing_since_.reset();
  before_ = std::move(in_force_);
  if (moves_units) before_.reset();
  in_force_ = std::move(run);
  probe_in_force_ = deliberate;
  pushed_at_ = now;
  quiet_since_ = now;
  return flap;
}

absl::Duration PlanFlaps::StartWait(const DwellOptions& base) const {
  if (!blipped_ || probe_in_force_ || !in_force_.has_value() || BalancesBySpeed(*in_force_)) {
    return absl::ZeroDuration();
  }
  return BlipWait(base);
}

absl::Duration PlanFlaps::BlipWait(const DwellOptions& base) const {
  return std::min(std::max(Hold(base), base.flap_hold), kBlipsOutlasted * longest_blip_);
}

DwellOptions PlanFlaps::Dwell(const DwellOptions& base, absl::Duration now) {
  if (base.flap_hold <= absl::ZeroDuration()) {
    level_ = 0;
    blipped_ = false;
    return base;
  }
  // Each hold that passes twice over without a change halves it.
  while (level_ > 0 && now - quiet_since_ >= 2 * Hold(base)) {
    quiet_since_ += 2 * Hold(base);
    --level_;
  }
  if (level_ == 0 && now - last_blip_at_ >= kBlipMemory) blipped_ = false;
  DwellOptions dwell = base;
  if (in_force_.has_value() && Balances(*in_force_)) {
    dwell.plan_dwell = std::max(base.plan_dwell, Hold(base));
  }
  return dwell;
}

std::string PlanFlaps::Describe(const DwellOptions& base) const {
  if (level_ == 0) {
    if (!blipped_) return "";
    return absl::StrCat("balancing ended by calm soon after it started: blips of up to ",
                        absl::FormatDuration(longest_blip_), " within the last ",
                        absl::FormatDuration(kBlipMemory), ": a straggler must last ",
                        absl::FormatDuration(BlipWait(base)),
                        " or turn chronic before balancing starts");
  }
  return absl::StrCat(
      "plans undone soon after they changed: ", level_, level_ == 1 ? " flap" : " flaps",
      " counted, so a change of a plan that balances is held ", absl::FormatDuration(Hold(base)),
      " by hysteresis ", base.dwell_hysteresis,
      blipped_ ? absl::StrCat(", and (balancing ended by calm soon after it "
                              "started: blips of up to ",
                              absl::FormatDuration(longest_blip_), ") a straggler must last ",
                              absl::FormatDuration(BlipWait(base)),
                              " or turn chronic before balancing starts")
               : "");
}

}  // namespace ballast::coordinator
