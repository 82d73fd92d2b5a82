// The decision loop's two loops on the measured step, the step feedback
// (step_feedback.h) and the offload check (offload_check.h), and the straggler's kind
// from the measured collectives (straggler_kind.h), with the price a throttled
// straggler's measured step sets and the fixed costs (fixed_costs.h), and the offloads
// refused while a throttled rank is relieved of units: each round's input gathered from
// the group's snapshot, and what the loops decide written to the round's correction_.
// Apart from decision_loop.cc, which plans.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/decision_loop.h"
#include "coordinator/fixed_costs.h"
#include "coordinator/group_figures.h"

namespace ballast::coordinator {
namespace {

// Whether the group's newest plan offloads units of a block planned by counts (a block of
// experts' replicas are judged by its loads: expert_plan.h).
bool OffloadsUnits(const GroupSnapshot& group) {
  for (const BlockPlan& bp : group.plan.blocks) {
    if (bp.offloads.empty()) continue;
    for (const BlockSnapshot& block : group.blocks) {
      if (block.block == bp.block.value() && !block.units_divide) return true;
    }
  }
  return false;
}

// A fingerprint of the ownership the group's newest plan runs on (its moves, else what
// the workers run), so the offload check compares plans on the same split.
uint64_t OwnershipFingerprint(const GroupSnapshot& group) {
  uint64_t h = 0;
  for (const BlockSnapshot& block : group.blocks) {
    h = absl::HashOf(h, block.block);
    for (RankId r : PlannedOwnership(group.plan, block)) h = absl::HashOf(h, r.value());
  }
  return h;
}

void AppendWhy(const std::string& line, std::string& why) {
  if (line.empty()) return;
  why = why.empty() ? line : absl::StrCat(why, "; ", line);
}

}  // namespace

std::vector<double> DecisionLoop::StepCorrection(const GroupSnapshot& group, int32_t straggler,
                                                 bool held, std::vector<std::string>& lines) {
  if (feedback_ == nullptr) return {};  // (Decide and DecideHeld reset correction_)
  StepFeedback::Round round;
  round.size = group.size;
  round.straggler = straggler;
  round.held = held;
  round.plan_version = WorkersRun(group).version;
  round.published_version = group.plan.version.value();
  round.step_seconds =
      MeasuredStep(group.ranks, round.plan_version, feedback_->options().min_steps);
  const size_t first_line = lines.size();
  StepFeedback::Correction correction = feedback_->Update(group.ref, round, lines);
  correction_.moved = correction_.moved || correction.moved;
  correction_.undo = correction_.undo || correction.undo;
  if (correction.news) {
    AppendWhy(absl::StrJoin(lines.begin() + first_line, lines.end(), "; "), correction_.why);
  }
  return std::move(correction.factors);
}

std::vector<int32_t> DecisionLoop::TakesNoOffloads(const GroupSnapshot& group, bool operator_hold,
                                                   bool cordon,
                                                   std::vector<std::string>& lines) const {
  if (operator_hold || cordon) return {};
  std::vector<int32_t> relieved = straggler_kind_.RelievedThrottled(
      group.ref, UnitsComputed(group), UnitsComputed(group, /*computed=*/false));
  if (relieved.empty()) return relieved;
  lines.push_back(absl::StrCat(
      "takes no offloads: ", relieved.size() > 1 ? "ranks " : "rank ",
      absl::StrJoin(relieved, ", "),
      ", throttled whole and relieved of units (work offloaded onto it runs throttled, "
      "its transfers too; its own units come back by the recheck once it stays calm)"));
  return relieved;
}

StragglerKind::Kind DecisionLoop::KindOf(const GroupSnapshot& group, int32_t straggler, bool cordon,
                                         const PooledGroup& pooled, double straggler_threshold,
                                         std::vector<std::string>& lines) {
  StragglerKind::Round round;
  round.straggler = straggler;
  if (straggler >= 0 && static_cast<size_t>(straggler) < pooled.ranks.size()) {
    round.straggler_slowdown = pooled.ranks[straggler].slowdown;
  }
  round.straggler_threshold = straggler_threshold;
  round.cordon = cordon;
  round.plan_version = WorkersRun(group).version;
  round.published_version = group.plan.version.value();
  round.offloads = OffloadsUnits(group);
  round.units = UnitsComputed(group);
  round.owned = UnitsComputed(group, /*computed=*/false);
  const int32_t min_steps = straggler_kind_.options().min_steps;
  round.step_seconds = MeasuredStep(group.ranks, round.plan_version, min_steps);
  round.collective_seconds = MeasuredCollectives(group.ranks, round.plan_version, min_steps);
  round.rank_collective_seconds =
      MeasuredRankCollectives(group.ranks, round.plan_version, min_steps, group.size);
  return straggler_kind_.Update(group.ref, round, lines);
}

bool DecisionLoop::BalancesFixedCosts(StragglerKind::Kind kind) const {
  return options_.fixed_costs == FixedCostsMode::kOn ||
         (options_.fixed_costs == FixedCostsMode::kAuto && kind == StragglerKind::Kind::kWhole);
}

ThrottledPriced DecisionLoop::PriceThrottled(const GroupSnapshot& group, int32_t straggler,
                                             StragglerKind::Kind kind, PooledGroup& pooled,
                                             StepPricing& pricing,
                                             std::vector<std::string>& lines) const {
  ThrottledPriced out;
  const ThrottledPrice how = options_.throttled_price;
  if (how == ThrottledPrice::kTimers) return out;
  // floor prices the collectives, a fixed cost: where none are balanced it prices nothing.
  if (how == ThrottledPrice::kFloor && !BalancesFixedCosts(kind)) return out;
  // The straggler, and a rank whose verdict stands that computes fewer units than calm:
  // relieved of units, a throttled rank's timers can call it calm, and priced by them in
  // those rounds the planner offloaded work back onto it and took it off again in the
  // next (the small GPT's 2x quota, docs/benchmarks.md, 2026-12-04 (d)). Not one on its
  // calm split whose timers call it calm: it may be calm (priced there, the GPT's calm
  // steps were predicted 31% long).
  const std::vector<int32_t> units = UnitsComputed(group);
  for (size_t r = 0; r < pooled.ranks.size(); ++r) {
    const auto rank = static_cast<int32_t>(r);
    if (rank != straggler && !straggler_kind_.RelievedOf(group.ref, rank, units)) continue;
    std::string not_gone;
    if (double floor_now = 0;
        straggler_kind_.ContentionGone(group.ref, rank, &floor_now, &not_gone)) {
      lines.push_back(absl::StrFormat(
          "rank %d: throttled whole by its verdict, but on the calm split the collectives cost "
          "%.4g s a step now, nearer the %.4g s they cost calm than its straggling %.4g s: "
          "its contention is gone, priced by its timers",
          rank, floor_now, straggler_kind_.CalmCollectives(group.ref),
          straggler_kind_.StragglingFloor(group.ref, rank)));
      continue;
    }
    const char* relieved = rank == straggler ? "" : " (relieved of units, its timers call it calm)";
    // Why its contention is not taken as gone (a price a calm-looking rank keeps).
    if (!not_gone.empty()) not_gone = absl::StrCat("; its contention not seen gone: ", not_gone);
    if (how == ThrottledPrice::kFloor) {
      const double straggling = straggler_kind_.StragglingFloor(group.ref, rank);
      if (!(straggling > 0)) continue;  // none measured
      // Relieved of units, at what its collectives measured relieved (straggler_kind.h,
      // "Relieved").
      int windows = 0;
      const double ratio = straggler_kind_.RelievedFloorRatio(group.ref, rank, units, &windows);
      const double floor = straggling * ratio;
      std::string relieved_price;
      if (ratio < 1) {
        relieved_price = absl::StrFormat(
            " times the %.3fx they cost it relieved of units (the median of %d windows): %.4g s",
            ratio, windows, floor);
      } else if (windows > 0) {
        relieved_price = absl::StrFormat(
            " (relieved of units they measured no less: the median of %d windows, their waits "
            "for the others included)",
            windows);
      }
      lines.push_back(absl::StrFormat(
          "rank %d: throttled whole%s, its collectives priced at the %.4g s they cost it "
          "straggling on the calm split%s, its units at the %.2fx its compute timers see "
          "(coordinator flag --throttled_price=floor)%s",
          rank, relieved, straggling, relieved_price, pooled.ranks[r].slowdown, not_gone));
      // The step prediction's wait near the balanced split (arrival_spread.h): the
      // straggler's spread, else a relieved rank's.
      if (const double spread = straggler_kind_.ArrivalSpread(group.ref, rank);
          spread > 0 && (pricing.throttled_rank < 0 || rank == straggler)) {
        pricing.throttled_rank = rank;
        pricing.arrival_spread = spread;
      }
      out.ranks.resize(pooled.ranks.size(), false);
      out.straggling_floors.resize(pooled.ranks.size(), 0);
      out.ranks[r] = true;
      out.straggling_floors[r] = floor;
      continue;
    }
    const double step = straggler_kind_.StepSlowdown(group.ref, rank);
    double& slowdown = pooled.ranks[r].slowdown;
    // None measured, or the timers see as much (within a percent: a rank whose timers see
    // its whole slowdown is priced as it was).
    if (!(step > slowdown * 1.01)) continue;
    lines.push_back(absl::StrFormat(
        "rank %d: throttled whole%s, priced at the %.2fx slowdown its step measured, not the "
        "%.2fx its compute timers see (coordinator flag --throttled_price=step)%s",
        rank, relieved, step, slowdown, not_gone));
    slowdown = step;
    out.ranks.resize(pooled.ranks.size(), false);
    out.ranks[r] = true;
  }
  if (!out.ranks.empty()) out.calm_collective_seconds = straggler_kind_.CalmCollectives(group.ref);
  return out;
}

std::vector<double> DecisionLoop::FixedSecondsPerStep(const GroupSnapshot& group,
                                                      const PooledGroup& pooled,
                                                      StragglerKind::Kind kind,
                                                      const ThrottledPriced& throttled,
                                                      std::vector<std::string>& lines,
                                                      std::optional<double>& common) const {
  std::vector<double> none(group.size, 0.0);
  if (options_.fixed_costs == FixedCostsMode::kOff) {
    lines.push_back(
        "fixed costs: off (coordinator flag --fixed_costs): collectives not balanced with "
        "the units");
    return none;
  }
  if (!BalancesFixedCosts(kind)) {
    lines.push_back(
        "fixed costs: none (--fixed_costs=auto: only for a straggler measured slow in its "
        "collectives too)");
    return none;
  }
  std::vector<double> collective(group.size, 0.0), slowdown(group.size, 0.0);
  for (const RankSnapshot& rank : group.ranks) {
    const int32_t r = rank.rank;
    if (r < 0 || r >= group.size || !rank.attached) continue;
    collective[r] = rank.collective_median;
    if (static_cast<size_t>(r) < pooled.ranks.size()) slowdown[r] = pooled.ranks[r].slowdown;
  }
  absl::StatusOr<FixedCosts> costs = EstimateFixedCosts(collective, slowdown, throttled);
  if (!costs.ok()) {  // reports are validated: only a bug gets here
    lines.push_back(absl::StrCat("fixed costs: ", costs.status().message()));
    return none;
  }
  lines.push_back(DescribeFixedCosts(*costs));
  const double calm = throttled.calm_collective_seconds;
  if (calm > 0 && throttled.straggling_floors.empty()) {
    lines.push_back(absl::StrFormat(
        "fixed costs: a rank priced at its step's slowdown pays its collectives at that "
        "slowdown times the %.4g s they cost calm, not at what it measured (already in its "
        "step)",
        calm));
  } else if (calm > 0) {
    lines.push_back(absl::StrFormat(
        "fixed costs: a throttled rank pays its collectives' straggling floor (relieved of "
        "units, times the share they cost it relieved), not what it measured under this "
        "plan; the others what they measured, at most their slowdown times the %.4g s they "
        "cost calm",
        calm));
  }
  if (costs->measured) common = costs->common;
  return costs->excess;
}

int32_t DecisionLoop::RelievedSender(const PooledGroup& pooled, int32_t straggler,
                                     const std::vector<int32_t>& relieved) {
  if (relieved.empty()) return -1;
  if (straggler < 0) return relieved.front();
  for (int32_t r : relieved) {
    if (static_cast<size_t>(r) < pooled.ranks.size() && pooled.ranks[r].straggling) return r;
  }
  return -1;
}

bool DecisionLoop::RefusesOffloads(const GroupSnapshot& group, int32_t straggler, bool chronic,
                                   int32_t sender, bool operator_hold, bool cordon,
                                   std::vector<std::string>& lines, bool& probing) {
  probing = false;
  const bool check_refuses =
      ChecksOffloads(group, straggler, chronic, operator_hold, cordon, lines, probing);
  if (check_refuses || sender < 0) return check_refuses;
  lines.push_back(absl::StrCat(
      "offloads refused: rank ", sender, ", throttled whole and relieved of units, ",
      straggler < 0 ? "with no rank straggling" : "straggles",
      ": its own units are what would be offloaded, and offloads on top of a throttled rank's "
      "reshard ran slower than none in every check that measured them (a further reshard "
      "relieves it)"));
  // A plan in force that offloads is not kept by hysteresis (undo); the refusal follows
  // from the verdicts the lines above give, so the change it makes is no noise either.
  if (OffloadsUnits(group)) {
    correction_.undo = true;
    correction_.moved = true;
    AppendWhy(lines.back(), correction_.why);
  }
  return true;
}

bool DecisionLoop::ChecksOffloads(const GroupSnapshot& group, int32_t straggler, bool chronic,
                                  bool operator_hold, bool cordon, std::vector<std::string>& lines,
                                  bool& probing) {
  if (offload_check_ == nullptr) return false;
  // A cordon is an operator's order too, and only transfers empty a device: nothing is
  // refused while one stands, whatever verdict the check keeps.
  OffloadCheck::Round round;
  round.straggler = straggler;
  round.chronic = chronic;
  round.held = operator_hold || cordon;
  round.plan_version = WorkersRun(group).version;
  round.published_version = group.plan.version.value();
  round.offloads = OffloadsUnits(group);
  round.ownership = OwnershipFingerprint(group);
  round.step_seconds =
      MeasuredStep(group.ranks, round.plan_version, offload_check_->options().min_steps);
  const size_t first_line = lines.size();
  const OffloadCheck::Verdict v = offload_check_->Update(group.ref, round, lines);
  probing = v.probing;
  if (cordon) {
    lines.push_back(
        "offload check: a rank is cordoned: offloads are not refused (only transfers empty its "
        "device)");
    return false;
  }
  correction_.moved = correction_.moved || v.changed;
  correction_.undo = correction_.undo || v.undo;
  if (v.changed) {
    AppendWhy(absl::StrJoin(lines.begin() + first_line, lines.end(), "; "), correction_.why);
  }
  return v.refuse;
}

}  // namespace ballast::coordinator
