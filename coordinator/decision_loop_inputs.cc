// DecisionLoop::GatherInputs (decision_loop.h): one round's planner input, read off the
// group's snapshot. Per block: the ranks' prices from the speed model's estimates pooled
// per rank (fitted over unit counts where a rank ran several), the judge's verdict, the
// link's price, the fixed costs, the step feedback's correction, offloads refused (by the
// offload check, or for a relieved throttled rank) and the ranks that take none (those
// loops and the straggler's kind: decision_loop_step.cc), cordons, and a block of
// experts' loads. Apart from decision_loop.cc, which ticks, plans and publishes.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/decision_loop.h"
#include "coordinator/group_figures.h"
#include "coordinator/planner/expert_plan.h"
#include "coordinator/rank_speeds.h"

namespace ballast::coordinator {
namespace {

// Under the job's capacity cap an expert keeps at most ExpertCapacity (ballast/plan.h) of
// a Forward's tokens: its predicted work is its tokens, capped at that over the step's
// Forwards. The reports give T x top_k (the tokens routed, summed over experts), not T and
// top_k apart: the cap is the same either way (its product may round an ulp apart from
// the workers': this is a prediction), and only its bound at T, which no expert's tokens
// exceed, is taken at T x top_k instead.
void CapUnitWork(double factor, int32_t forwards, std::vector<double>& work) {
  if (!(factor > 0) || forwards <= 0 || work.empty()) return;
  const double routed = std::accumulate(work.begin(), work.end(), 0.0) / forwards;
  const double cap = static_cast<double>(forwards) *
                     static_cast<double>(ExpertCapacity(factor, std::llround(routed), /*top_k=*/1,
                                                        static_cast<int32_t>(work.size())));
  for (double& w : work) w = std::min(w, cap);
}

// What a reshard moves with each unit, in units of its weights (BlockInfo::unit_bytes
// counts the weights alone): every field worker_lib/block.cc stores per parameter
// (kFieldsPerParam: value, gradient, two AdamW moments, the snapshot).
constexpr double kMovedFieldsPerUnit = 5;

const RankSnapshot* FindRank(const GroupSnapshot& group, int32_t rank) {
  auto it = std::lower_bound(group.ranks.begin(), group.ranks.end(), rank,
                             [](const RankSnapshot& r, int32_t value) { return r.rank < value; });
  return it != group.ranks.end() && it->rank == rank ? &*it : nullptr;
}

}  // namespace

bool DecisionLoop::GatherInputs(const GroupSnapshot& group, const JobPolicy& policy, bool held,
                                bool operator_hold, absl::Duration start_wait,
                                GroupPlannerInput& input, std::vector<std::string>& lines,
                                StepPricing& pricing) {
  // A block whose units divide is timed per token (group_registry.h), so its work is its
  // tokens; the others' is their units. It weighs the block in the pooled verdict and in
  // the fixed seconds' shares alike.
  std::vector<double> block_work;
  for (const BlockSnapshot& block : group.blocks) {
    block_work.push_back(
        block.units_divide && !block.unit_tokens.empty()
            ? std::accumulate(block.unit_tokens.begin(), block.unit_tokens.end(), 0.0)
            : block.num_units);
  }
  // Every block's speeds first: a rank's verdict is pooled over all of them.
  std::vector<PoolBlock> speeds;
  for (const BlockSnapshot& block : group.blocks) {
    absl::StatusOr<GroupSpeeds> s =
        speeds_->Speeds(group.job, GroupId(group.name), BlockId(block.block), policy);
    if (!s.ok() || static_cast<int32_t>(s->ranks.size()) < group.size) {
      lines.push_back(absl::StrCat("block ", block.block, ": not every rank has reported"));
      return false;
    }
    for (const RankSpeed& rs : s->ranks) {
      if (rs.has_estimate) continue;
      // A rank whose plan gives all its units away measures nothing, and would never
      // measure again if the planner waited for it (after a coordinator restart, under a
      // cordon or a hold): it is planned at the block's reference speed instead.
      // So does one whose experts got no tokens (a block whose units divide is timed per
      // token): a cold expert must not stall the group it should be balancing.
      const RankSnapshot* entry = FindRank(group, rs.rank.value());
      if (entry != nullptr && entry->attached &&
          (entry->last_units_computed == 0 || block.units_divide)) {
        continue;
      }
      lines.push_back(
          absl::StrCat("block ", block.block, ": rank ", rs.rank.value(), " has no estimate yet"));
      return false;
    }
    speeds.push_back({.speeds = *std::move(s), .work = block_work[speeds.size()]});
  }
  absl::StatusOr<PooledGroup> pooled = PoolRankSpeeds(speeds, policy.straggler_threshold);
  if (!pooled.ok()) {  // the policy was validated when set: only a bug gets here
    lines.push_back(std::string(pooled.status().message()));
    return false;
  }
  std::vector<int32_t> ranks;
  for (const RankSnapshot& r : group.ranks) ranks.push_back(r.rank);
  // A group running all-local waits a marginal straggler out before it balances
  // (rank_speeds.h). The planner's plan in force states a reshard the workers have made
  // until its next change, and runs all-local then (PlanRunsAllLocal); an operator's hold
  // states its ownership on purpose for as long as it holds (held_plan.h), and a held
  // group runs all-local only where its plan states nothing (also, since the planner's
  // statement stays, not where a hold at the even split follows a made move back to it,
  // which the hold goes on stating as its plan in force did).
  const bool all_local = operator_hold ? group.plan.blocks.empty() : PlanRunsAllLocal(group);
  const StragglerJudge::Verdict verdict =
      judge_->Judge(group.ref, ranks, group.size, *pooled, static_cast<int32_t>(speeds.size()),
                    policy, all_local, start_wait, lines);
  std::string link_line;
  const double bytes_per_second = LinkBytesPerSecond(group.link, group.link_stale_after,
                                                     options_.link_bytes_per_second, &link_line);
  lines.push_back(std::move(link_line));
  const int32_t straggler = verdict.straggler;
  const std::vector<bool> cordoned = CordonedRanks(group);
  const bool cordon = std::find(cordoned.begin(), cordoned.end(), true) != cordoned.end();
  const StragglerKind::Kind kind =
      KindOf(group, straggler, cordon, *pooled, policy.straggler_threshold, lines);
  // (Not under an operator's hold: nothing is planned there.)
  std::vector<bool> chronic = verdict.chronic;
  const bool reshard_kind = kind == StragglerKind::Kind::kCompute ? options_.reshard_slower_devices
                            : kind == StragglerKind::Kind::kWhole ? options_.reshard_throttled_ranks
                                                                  : false;
  // The group's step: its slowest rank's median.
  double step_seconds = 0;
  for (const RankSnapshot& rank : group.ranks) {
    if (rank.attached) step_seconds = std::max(step_seconds, rank.step_median);
  }
  if (reshard_kind && !operator_hold && straggler >= 0 && straggler < group.size &&
      !chronic[straggler]) {
    if (const std::optional<absl::Duration> at = straggler_kind_.MeasuredAt(group.ref, straggler)) {
      double own = 0;
      double others = 0;
      const bool still_last = options_.reshard_still_last &&
                              straggler_kind_.StillLast(group.ref, straggler, &own, &others);
      if (still_last) {
        lines.push_back(absl::StrFormat(
            "rank %d still arrives last, relieved: its collectives %.4f s a step, the others' "
            "%.4f s or more (they wait for it)",
            straggler, own, others));
      }
      chronic[straggler] =
          judge_->KindMeasuredChronic(group.ref, straggler, kind, *at, still_last, policy, lines);
    }
  }
  const ThrottledPriced throttled = PriceThrottled(group, straggler, kind, *pooled, pricing, lines);
  const std::vector<double> fixed_per_step =
      FixedSecondsPerStep(group, *pooled, kind, throttled, lines, pricing.common_fixed_seconds);
  // The check first: while it probes, the step feedback holds (each judges its own plan).
  // It sees the straggler in every mode (it probes only offloads pushed, and plain tensor
  // parallelism under mode observe is a step to compare them with); the step feedback
  // only where plans are pushed (a probe in observe would change nothing, time out, and
  // settle it before the job balances).
  const std::vector<int32_t> takes_none = TakesNoOffloads(group, operator_hold, cordon, lines);
  bool checking = false;
  // A sender's own offloads are refused on top of a reshard: among the ranks that take
  // none, those that own fewer units than calm. Relieved by the offloads in force alone,
  // a rank would have them refused, and pushed again the next round (relieved no more).
  std::vector<int32_t> resharded;
  const std::vector<int32_t> owned_units = UnitsComputed(group, /*computed=*/false);
  for (int32_t r : takes_none) {
    if (straggler_kind_.RelievedOf(group.ref, r, owned_units)) resharded.push_back(r);
  }
  const bool straggler_chronic = straggler >= 0 && straggler < group.size && chronic[straggler];
  const bool refuse_offloads = RefusesOffloads(group, straggler, straggler_chronic,
                                               RelievedSender(*pooled, straggler, resharded),
                                               operator_hold, cordon, lines, checking);
  const std::vector<double> correction =
      StepCorrection(group, Balances(policy.mode) ? straggler : -1, held || checking, lines);
  // A rank's fixed seconds go to the blocks by their share of the group's reference
  // compute, so that every block sees the same ratios between ranks.
  double reference_total = 0;
  for (size_t i = 0; i < speeds.size(); ++i) {
    reference_total += speeds[i].speeds.reference_seconds_per_unit * block_work[i];
  }
  absl::btree_map<size_t, std::vector<int32_t>> fitted;  // rank -> blocks priced by a fit
  size_t b = 0;
  for (const BlockSnapshot& block : group.blocks) {
    const double share = reference_total > 0 ? speeds[b].speeds.reference_seconds_per_unit *
                                                   block_work[b] / reference_total
                                             : 0;
    const GroupSpeeds& block_speeds = speeds[b++].speeds;
    GroupBlockInput& in = input.blocks.emplace_back();
    in.input.block = BlockId(block.block);
    in.input.owner_of_unit = PlannedOwnership(group.plan, block);
    in.move_unconfirmed = in.input.owner_of_unit != block.owner_of_unit;
    // Weights out once a step, gradients back once per micro-batch.
    in.input.transfer_seconds_per_unit =
        (1.0 + block.micro_batches) * static_cast<double>(block.unit_bytes) / bytes_per_second;
    // Routing load is predictable from step to step (Pro-Prophet): the smoothed tokens
    // are the next step's prediction (group_registry.h), capped as the plan will cap
    // them (none in observe, which pushes no cap).
    in.units_divide = block.units_divide;
    if (block.units_divide) {
      in.input.unit_work.assign(block.unit_tokens.begin(), block.unit_tokens.end());
      if (Balances(policy.mode)) {
        CapUnitWork(policy.expert_capacity_factor, block.token_forwards, in.input.unit_work);
      }
      // A moved expert takes every field it stores, once; priced over the steps in
      // reshard_after, as long as a skew must last to be resharded.
      in.input.move_seconds_per_unit =
          kMovedFieldsPerUnit * static_cast<double>(block.unit_bytes) / bytes_per_second;
      if (step_seconds > 0) {
        in.input.reshard_horizon_steps = absl::ToDoubleSeconds(policy.reshard_after) / step_seconds;
      }
    }
    // (A correction is made only when the timers see a straggler: it never makes a calm
    // group balance.)
    in.input.calm = verdict.calm;
    // A recheck that ended a relieved rank's verdict gives its units back at once.
    in.input.calm_lasted =
        verdict.calm_lasted || (verdict.calm && straggler_kind_.UnitsGoingBack(group.ref));
    in.input.offloads_refused = refuse_offloads && !block.units_divide;
    std::vector<int32_t> owned(group.size, 0);
    for (RankId r : in.input.owner_of_unit) ++owned[r.value()];
    for (const RankSpeed& rs : block_speeds.ranks) {
      PlannerRank pr;
      const size_t r = static_cast<size_t>(rs.rank.value());
      pr.cordoned = r < cordoned.size() && cordoned[r];
      // A fit over unit counts prices a unit moved. Not for experts, timed per token, nor
      // a cordoned rank: it computes nothing, and the planner would charge it the fixed
      // part all the same (a floor under every plan's step).
      const RankPrice price =
          PriceRank(rs, block_speeds, *pooled,
                    options_.unit_count_fit && !block.units_divide && !pr.cordoned);
      pr.seconds_per_unit = price.seconds_per_unit;
      const size_t rank_index = static_cast<size_t>(rs.rank.value());
      const bool judged =
          rank_index < pooled->ranks.size() && pooled->ranks[rank_index].slowdown > 0;
      if (!rs.has_estimate && !judged) {  // it computes nothing (above)
        pr.seconds_per_unit = block_speeds.reference_seconds_per_unit;
        if (!(pr.seconds_per_unit > 0)) {
          lines.push_back(absl::StrCat("block ", block.block, ": no rank has an estimate yet"));
          return false;
        }
        lines.push_back(absl::StrCat(
            "block ", block.block, ": rank ", rs.rank.value(),
            " computes no units (or, for experts, no tokens) under the plan it runs, so it "
            "has no estimate: planned at the block's reference speed until it reports one"));
      }
      pr.owned_units = owned[rs.rank.value()];
      pr.fixed_seconds = price.fixed_seconds;
      if (r < correction.size()) {
        pr.fixed_seconds *= correction[r];
        pr.seconds_per_unit *= correction[r];
      }
      if (r < fixed_per_step.size()) pr.fixed_seconds += fixed_per_step[r] * share;
      if (price.fitted) fitted[r].push_back(block.block);
      pr.chronic = rs.rank.value() < group.size && chronic[rs.rank.value()];
      pr.takes_no_offloads = !block.units_divide && std::find(takes_none.begin(), takes_none.end(),
                                                              rs.rank.value()) != takes_none.end();
      in.input.ranks.push_back(pr);
    }
    // A skew that lasts is worth resharding the experts for (expert_plan.h), and a
    // marginal one is waited out first. Judged on the loads as the planner will see them,
    // in its band, so the two agree on what balanced means. Not while a move the workers
    // have not confirmed is under way: a second reshard would stack on the first. (Input
    // the planner refuses is refused there, by name.)
    if (PlansByLoads(in.input, policy)) {
      const BlockPlan* in_force = nullptr;
      for (const BlockPlan& bp : group.plan.blocks) {
        if (bp.block.value() == block.block) in_force = &bp;
      }
      absl::StatusOr<LoadsSkew> skew = SkewOfLoads(in.input, policy, in_force);
      if (skew.ok()) {
        const StragglerJudge::SkewVerdict v =
            judge_->JudgeSkew(group.ref, block.block, *skew, policy, lines);
        in.input.skew_waits = v.waits;
        in.input.skew_lasted = v.lasted && !in.move_unconfirmed;
        if (v.lasted && in.move_unconfirmed) {
          lines.push_back(absl::StrCat("block ", block.block,
                                       ": a move is not confirmed by every worker yet: no "
                                       "further reshard until it is"));
        }
      }
    }
  }
  for (const auto& [rank, blocks] : fitted) {
    lines.push_back(absl::StrCat(
        "rank ", rank, ": block time fitted as fixed + per unit over the unit counts it ran, in ",
        blocks.size() > 1 ? "blocks " : "block ", absl::StrJoin(blocks, ", "),
        " (the planner's ranks show the split)"));
  }
  return true;
}

}  // namespace ballast::coordinator
