#include "coordinator/decision_loop.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace ballast::coordinator {
namespace {

// The step line's tail for the wait a throttled rank's arrival spread adds (group_figures.h).
void AppendSpreadWait(const StepPrediction& p, const StepPricing& pricing, std::string& line) {
  if (!(p.spread_wait > 0)) return;
  absl::StrAppend(&line,
                  absl::StrFormat(" + %.4g s of waits for rank %d's arrival spread "
                                  "(%.4f s; near the balanced split)",
                                  p.spread_wait, pricing.throttled_rank, pricing.arrival_spread));
}

// Why a group cannot be planned yet (empty: it can): not every rank has registered.
std::string WaitingForRanks(const GroupSnapshot& group) {
  if (static_cast<int32_t>(group.ranks.size()) >= group.size) return "";
  return absl::StrCat("waiting for ranks: ", group.ranks.size(), " of ", group.size, " registered");
}

}  // namespace

DecisionLoop::DecisionLoop(const DecisionLoopOptions& options, Clock* clock,
                           GroupRegistry* registry, StragglerJudge* judge,
                           const JobSettings* settings, SpeedModel* speeds)
    : options_(options),
      clock_(clock),
      registry_(registry),
      judge_(judge),
      settings_(settings),
      straggler_kind_(clock, options.straggler_kind),
      speeds_(speeds) {
  if (options.step_feedback.has_value()) {
    feedback_ = std::make_unique<StepFeedback>(clock_, *options.step_feedback);
  }
  if (options.offload_check.has_value()) {
    offload_check_ = std::make_unique<OffloadCheck>(clock_, *options.offload_check);
  }
}

DecisionLoop::Entry& DecisionLoop::EntryOf(const GroupRef& ref) {
  Entry& entry = entries_[ref.key];
  if (entry.incarnation != ref.incarnation) entry = Entry{.incarnation = ref.incarnation};
  return entry;
}

bool DecisionLoop::Tick() {
  absl::MutexLock tick(&tick_mu_);
  const GroupRegistry::Forgotten forgotten = registry_->ForgetIdle();
  for (const GroupRef& ref : forgotten.groups) {
    judge_->Forget(ref.key);
    if (feedback_ != nullptr) feedback_->Forget(ref.key);
    if (offload_check_ != nullptr) offload_check_->Forget(ref.key);
    straggler_kind_.Forget(ref.key);
  }
  {
    absl::MutexLock lock(&mu_);
    for (const GroupRef& ref : forgotten.groups) {
      auto it = entries_.find(ref.key);
      if (it != entries_.end() && it->second.incarnation == ref.incarnation) entries_.erase(it);
    }
  }
  const absl::Duration now = clock_->Monotonic();
  for (const GroupRef& ref : registry_->Groups()) {
    const std::string& job = ref.key.first;
    const JobPolicy policy = settings_->PolicyFor(job);
    DecisionRecord last;
    Damping damping;
    bool operator_changed = false;
    bool paused = false;
    {
      absl::MutexLock lock(&mu_);
      Entry& entry = EntryOf(ref);
      if (now < entry.next_decision) continue;
      entry.next_decision = now + policy.report_period;
      paused = settings_->Paused(job);
      if (paused) {
        entry.record.reasons = {.before = {"balancing paused: the plan in force stays"}};
      } else {
        last = entry.record;  // only this loop writes it, one round at a time
        damping.dwell = entry.flaps.Dwell(options_.dwell, now);
        damping.described = entry.flaps.Describe(options_.dwell);
        damping.start_wait = entry.flaps.StartWait(options_.dwell);
        operator_changed = std::exchange(entry.operator_changed, false);
      }
    }
    // A straggle that begins with an operator's change is the change's, not a blip.
    if (operator_changed) judge_->OperatorChanged(ref);
    if (paused) {
      // Its steps meanwhile are no straggler's to judge offloads by (offload_check.h).
      if (offload_check_ != nullptr) offload_check_->Forget(ref.key);
      continue;
    }
    // Copied under the registry's lock; planned without it.
    const std::optional<GroupSnapshot> group = registry_->Snapshot(ref.key, true);
    if (!group.has_value() || group->ref != ref) continue;  // forgotten since
    const absl::Time began = absl::Now();
    const std::optional<GroupHold> hold = settings_->HoldFor(job, group->name);
    Outcome outcome = hold.has_value() ? DecideHeld(*group, policy, *hold, std::move(last))
                                       : Decide(*group, policy, std::move(damping),
                                                operator_changed, std::move(last));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - began);
    // A change is logged with the round's verdicts and prices (explain's first lines):
    // explain keeps only the last round, and a plan's reasons are gone by the next.
    const std::string why =
        outcome.change.has_value() ? absl::StrJoin(outcome.record.reasons.before, "; ") : "";
    // The record first: once the plan reaches the workers, explain and status must say
    // why (a reader that got the plan found "no decision yet" before).
    {
      absl::MutexLock lock(&mu_);
      ++decisions_;
      ObserveBounded(decision_seconds_, seconds);
      auto it = entries_.find(ref.key);
      if (it != entries_.end() && it->second.incarnation == ref.incarnation) {
        it->second.record = std::move(outcome.record);
        // An operator's hold is no noise: the group is judged afresh after it. (A plan
        // the registry then drops went to a group forgotten since, whose entry goes too.)
        if (hold.has_value()) {
          it->second.flaps = PlanFlaps();
        } else if (outcome.change.has_value()) {
          it->second.flaps.Seed(group->plan.blocks);  // what the change replaced, if unknown
          it->second.flaps.Pushed(outcome.change->blocks, outcome.moves_units, outcome.probed,
                                  options_.dwell, now, outcome.calm);
        }
      }
    }
    bool published = false;
    std::string summary;
    if (outcome.change.has_value()) {
      summary = PlanSummary(*outcome.change);
      published = registry_->Publish(ref, *outcome.change);
      // The count to chronic restarts at the planner's own reshards, which it spaces by
      // reshard_after; an operator's hold is not one of them, and its ownership replaces
      // the planner's. A straggler slow through a held reshard and its release has
      // lasted, and the planner may reshard it at once.
      if (published && outcome.moves_units) {
        if (hold.has_value()) {
          judge_->HoldMovedUnits(ref);
        } else {
          judge_->UnitsMoved(ref, outcome.relieved);
        }
      }
    }
    if (published) {
      BALLAST_LOG(INFO) << "job=" << group->job << " group=" << group->name << " new plan "
                        << summary << " why: " << why;
    }
    if (!outcome.probe.empty()) {
      BALLAST_LOG(INFO) << "job=" << group->job << " group=" << group->name << " " << outcome.probe;
    }
  }
  return !forgotten.groups.empty() || forgotten.agents > 0;
}

DecisionLoop::Outcome DecisionLoop::Decide(const GroupSnapshot& group, const JobPolicy& policy,
                                           Damping damping, bool operator_changed,
                                           DecisionRecord last) {
  const DwellOptions& dwell = damping.dwell;
  Outcome out{.record = std::move(last)};
  DecisionRecord& record = out.record;
  std::vector<std::string> lines;
  if (std::string waiting = WaitingForRanks(group); !waiting.empty()) {
    record.reasons = {.before = {std::move(waiting)}};
    return out;
  }
  GroupPlannerInput planner_input;
  planner_input.group = GroupId(group.name);
  correction_ = {};
  // Written to the record with the decisions it goes with (their blocks hold the excess).
  StepPricing pricing;
  std::optional<absl::Duration> since_change;
  if (group.plan_changed_at.has_value()) {
    since_change = clock_->Monotonic() - *group.plan_changed_at;
  }
  // Inside a flap hold the planner would swallow a probe: the step feedback waits it out.
  const bool flap_held =
      dwell.plan_dwell > options_.dwell.plan_dwell && DwellHolds(policy, dwell, since_change);
  // Mode off judges nothing: the offload check's steps would be no straggler's.
  if (policy.mode == BalanceMode::kOff && offload_check_ != nullptr) {
    offload_check_->Forget(group.ref.key);
  }
  if (policy.mode != BalanceMode::kOff &&
      !GatherInputs(group, policy, flap_held, /*operator_hold=*/false, damping.start_wait,
                    planner_input, lines, pricing)) {
    record.reasons = {.before = std::move(lines)};
    return out;
  }
  const WorkersPlan workers = WorkersRun(group);
  planner_input.in_force = group.plan;
  planner_input.unknown_plan_in_force = workers.version > group.plan.version.value();
  planner_input.since_change = since_change;
  planner_input.in_force_measured_worse = correction_.undo;
  planner_input.deliberate = operator_changed || correction_.moved;
  // Every block carries the judge's verdict (GatherInputs).
  out.calm = !planner_input.blocks.empty() &&
             std::all_of(planner_input.blocks.begin(), planner_input.blocks.end(),
                         [](const GroupBlockInput& b) { return b.input.calm; });
  if (!damping.described.empty()) lines.push_back(std::move(damping.described));
  GroupDecision decision = DecideGroup(planner_input, policy, dwell, &workspace_);
  // Moved, not copied: Explain renders this round's blocks from the record's decisions (a
  // block whose planning failed keeps its last decision there, but its failure is shown).
  for (auto& [block_id, block_decision] : decision.blocks) {
    record.decisions[block_id] = std::move(block_decision);
  }
  if (policy.mode == BalanceMode::kOff) {
    // Off plans nothing, so it predicts nothing: an earlier mode's decisions would have
    // status and /metrics predict a plan no longer in force (the interleaved benchmark
    // measured mode off's prediction 27% off its step: the last auto plan's).
    record.decisions.clear();
    record.pricing = {};
  } else {
    record.pricing = pricing;
  }
  decision.blocks.clear();
  // Only with a change (DecideGroup): a reshard restarts the count to chronic
  // (StragglerJudge::UnitsMoved), once published.
  out.moves_units = decision.moves_units;
  out.relieved = std::move(decision.relieved);
  std::vector<std::string> after;
  if (!record.decisions.empty()) {
    const StepPrediction p = PredictStep(record.decisions, record.pricing, group.ranks);
    // Two calls: absl's format strings must be constants (clang checks it).
    after.push_back(
        record.pricing.common_fixed_seconds.has_value()
            ? absl::StrFormat("step: %.4f s predicted = %.4f s of blocks (compute, and each "
                              "rank's fixed seconds beyond the least) + %.4f s of collectives "
                              "(the least fixed seconds)",
                              p.Step(), p.blocks, p.collectives)
            : absl::StrFormat("step: %.4f s predicted = %.4f s of block compute + %.4f s of "
                              "collectives (the smallest median over the ranks: their cost "
                              "without waiting for a late peer)",
                              p.Step(), p.blocks, p.collectives));
    AppendSpreadWait(p, record.pricing, after.back());
  }
  std::optional<WorkloadPlan> change = std::move(decision.change);
  decision.change.reset();
  planner_input.in_force = WorkloadPlan();  // ExplainGroup reads only the blocks
  record.reasons = {.before = std::move(lines),
                    .planned = std::move(planner_input),
                    .decision = std::move(decision),
                    .after = std::move(after)};
  out.probed = correction_.moved;
  out.probe = correction_.why;
  if (!change.has_value()) return out;
  out.change = Numbered(group, workers, *std::move(change));
  return out;
}

DecisionLoop::Outcome DecisionLoop::DecideHeld(const GroupSnapshot& group, const JobPolicy& policy,
                                               const GroupHold& hold, DecisionRecord last) {
  Outcome out{.record = std::move(last)};
  DecisionRecord& record = out.record;
  if (std::string waiting = WaitingForRanks(group); !waiting.empty()) {
    record.reasons = {.before = {absl::StrCat("held, ", waiting)}};
    return out;
  }
  GroupPlannerInput input;
  input.group = GroupId(group.name);
  input.in_force = group.plan;
  const WorkersPlan workers = WorkersRun(group);
  input.unknown_plan_in_force = workers.version > group.plan.version.value();
  std::vector<BlockShape> shapes;
  for (const BlockSnapshot& block : group.blocks) {
    shapes.push_back({.block = BlockId(block.block),
                      .num_units = block.num_units,
                      .owner_of_unit = block.owner_of_unit,
                      .units_divide = block.units_divide});
  }
  GroupDecision decision = DecideHeldGroup(input, shapes, CordonedRanks(group), hold, policy);
  std::optional<WorkloadPlan> change = std::move(decision.change);
  decision.change.reset();
  out.moves_units = change.has_value() && decision.moves_units;

  // The held plan priced as the planner prices its own (EvaluatePlan), once every rank has
  // an estimate: status then predicts held steps too, and the interleaved benchmark's
  // static segments are predicted as its balancing ones are.
  record.decisions.clear();
  record.pricing = {};
  std::vector<std::string> lines, after;
  GroupPlannerInput priced;
  StepPricing pricing;
  correction_ = {};
  if (GatherInputs(group, policy, /*held=*/true, /*operator_hold=*/true, absl::ZeroDuration(),
                   priced, lines, pricing)) {
    const WorkloadPlan& runs = change.has_value() ? *change : group.plan;
    JobPolicy held_policy = policy;
    held_policy.mode = BalanceMode::kAuto;  // the hold's techniques are not the mode's to refuse
    for (const GroupBlockInput& block : priced.blocks) {
      BlockPlan plan;
      plan.block = block.input.block;
      for (const BlockPlan& bp : runs.blocks) {
        if (bp.block == plan.block) plan = bp;
      }
      absl::StatusOr<PlanCost> cost = EvaluatePlan(block.input, held_policy, plan);
      if (!cost.ok()) {
        after.push_back(absl::StrCat("block ", plan.block.value(),
                                     ": the held plan is not priced: ", cost.status().message()));
        record.decisions.clear();
        break;
      }
      BlockDecision& d = record.decisions[plan.block.value()];
      d.plan = std::move(plan);
      d.predicted_step_seconds = cost->step_seconds;
      d.rank_seconds = cost->rank_seconds;
      d.objective = cost->objective;
      d.chosen = CandidateKind::kCurrent;
    }
  }
  if (!record.decisions.empty()) {
    record.pricing = pricing;
    const StepPrediction p = PredictStep(record.decisions, record.pricing, group.ranks);
    after.push_back(absl::StrFormat(
        "step: %.4f s predicted for the held plan = %.4f s of blocks + %.4f s of collectives",
        p.Step(), p.blocks, p.collectives));
    AppendSpreadWait(p, record.pricing, after.back());
  }
  input.in_force = WorkloadPlan();  // ExplainGroup reads only the blocks
  record.reasons = {.before = std::move(lines),
                    .planned = std::move(input),
                    .decision = std::move(decision),
                    .after = std::move(after)};
  out.probe = correction_.why;  // a probe the hold dropped
  if (change.has_value()) out.change = Numbered(group, workers, *std::move(change));
  return out;
}

std::vector<bool> DecisionLoop::CordonedRanks(const GroupSnapshot& group) const {
  std::vector<bool> cordoned(static_cast<size_t>(group.size), false);
  for (const RankSnapshot& rank : group.ranks) {
    if (rank.rank >= 0 && rank.rank < group.size) {
      cordoned[rank.rank] = settings_->Cordoned(rank.device);
    }
  }
  return cordoned;
}

DecisionLoop::WorkersPlan DecisionLoop::WorkersRun(const GroupSnapshot& group) {
  WorkersPlan out;
  for (const RankSnapshot& rank : group.ranks) {
    if (!rank.attached) continue;
    out.version = std::max(out.version, rank.last_plan_version);
    out.number = std::max(out.number, rank.last_plan_number);
  }
  return out;
}

WorkloadPlan DecisionLoop::Numbered(const GroupSnapshot& group, const WorkersPlan& workers,
                                    WorkloadPlan plan) const {
  // Above every version a worker runs, so the workers take it (they ignore older ones),
  // and numbered on from the plan they run, so a restart does not count from 1 again.
  const int64_t next_version =
      std::max(group.plan.version.value() + 1, absl::ToUnixMicros(clock_->Now()));
  plan.version = PlanVersion(std::max(next_version, workers.version + 1));
  plan.number = std::max(group.plan.number, workers.number) + 1;
  return plan;
}

void DecisionLoop::ReplanNow(const std::string& job) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : entries_) {
    if (job.empty() || key.first == job) {
      entry.next_decision = absl::ZeroDuration();
      entry.flaps = PlanFlaps();  // an operator's change is no noise
      entry.operator_changed = true;
    }
  }
}

DecisionRecord DecisionLoop::Record(const GroupRef& ref) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(ref.key);
  if (it == entries_.end() || it->second.incarnation != ref.incarnation) return {};
  return it->second.record;
}

StepPrediction DecisionLoop::Prediction(const GroupSnapshot& group) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(group.ref.key);
  if (it == entries_.end() || it->second.incarnation != group.ref.incarnation) return {};
  return PredictStep(it->second.record.decisions, it->second.record.pricing, group.ranks);
}

int64_t DecisionLoop::decisions() const {
  absl::MutexLock lock(&mu_);
  return decisions_;
}

std::vector<double> DecisionLoop::TakeDecisionSeconds() {
  absl::MutexLock lock(&mu_);
  std::vector<double> out;
  out.swap(decision_seconds_);
  return out;
}

}  // namespace ballast::coordinator
