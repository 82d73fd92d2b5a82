// DecisionLoop: on every Tick, each group whose report period has elapsed is planned:
//
//   snapshot (GroupRegistry::Snapshot, under the registry's lock, copied)
//     -> its inputs gathered off every lock: the speed model's estimates pooled per rank
//        (rank_speeds.h), the straggler judge's verdicts, the link's price, fixed costs,
//        cordons, the plan in force and what the workers run
//     -> the planner (DecideGroup in coordinator/planner/group_planner.h)
//     -> a changed plan numbered and published (GroupRegistry::Publish pushes it; dropped
//        if the group was forgotten or registered again meanwhile).
//
// A group an operator holds (`ballastctl hold`, JobSettings) is not planned: its hold's
// plan (held_plan.h) is pushed instead, until it is released.
//
// Plan versions are wall-clock microseconds (strictly increasing per group), so they stay
// newer than anything a worker holds even after the coordinator restarts without state.
//
// A round's planner input is read off the group's snapshot in decision_loop_inputs.cc;
// the two loops on the measured step (the step feedback, the offload check) get their
// rounds from decision_loop_step.cc.
//
// It keeps, per group, when the group is next due and what its last decision was (the
// blocks' decisions and the reasons behind them), for the admin reads' predictions and
// explanations. Ticks are serialised (one planning round at a time); everything else it
// offers is thread-safe.
//
//   DecisionLoop loop(options, clock, &registry, &judge, &settings, speeds);
//   loop.Tick();  // from the coordinator's ticker thread; Tick calls may overlap
#ifndef BALLAST_COORDINATOR_DECISION_LOOP_H_
#define BALLAST_COORDINATOR_DECISION_LOOP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ballast/plan.h"
#include "common/clock.h"
#include "coordinator/fixed_costs.h"
#include "coordinator/group_figures.h"
#include "coordinator/group_registry.h"
#include "coordinator/job_settings.h"
#include "coordinator/offload_check.h"
#include "coordinator/planner/group_planner.h"
#include "coordinator/planner/plan_flaps.h"
#include "coordinator/planner/planner.h"
#include "coordinator/speed_model.h"
#include "coordinator/step_feedback.h"
#include "coordinator/straggler_judge.h"
#include "coordinator/straggler_kind.h"

namespace ballast::coordinator {

struct DecisionLoopOptions {
  // The prior link bandwidth (link_model.h), until offloads measure it.
  double link_bytes_per_second = 1e9;
  DwellOptions dwell;
  // Balance each rank's collective time beyond the least with its units (fixed_costs.h):
  // in auto, where the straggler's collectives were measured slower with it
  // (straggler_kind.h).
  FixedCostsMode fixed_costs = FixedCostsMode::kAuto;
  StragglerKindOptions straggler_kind;
  // A straggler measured slow in its compute alone (a slower device), or throttled whole
  // (its collectives slow too: a CPU quota, a co-tenant), is chronic at once, its reshard
  // priced without waiting reshard_after (StragglerJudge::KindMeasuredChronic).
  bool reshard_slower_devices = true;
  bool reshard_throttled_ranks = true;
  // A further move off a relieved throttled rank that still arrives last is not spaced
  // from the last (StragglerJudge::KindMeasuredChronic's still_last).
  bool reshard_still_last = true;
  // How a straggler measured throttled whole is priced (fixed_costs.h: ThrottledPrice).
  ThrottledPrice throttled_price = ThrottledPrice::kFloor;
  // Price each rank's block compute as fixed seconds plus seconds per unit where a fit over
  // the unit counts it ran finds a fixed part (unit_count_fit.h); else per unit alone.
  bool unit_count_fit = true;
  // Probe the straggler's speed by the measured step (step_feedback.h). Unset: off.
  std::optional<StepFeedbackOptions> step_feedback;
  // Refuse the straggler's offloads where the measured step shows them no faster than the
  // best plan without them (offload_check.h). Unset: off.
  std::optional<OffloadCheckOptions> offload_check;
};

// A group's last decision, as the admin reads show it.
struct DecisionRecord {
  // Why the last decision came out as it did: lines the loop wrote (the speeds' verdict,
  // chronic ranks, the link; `before`, then `after`: the step prediction), around what
  // the planner decided, kept as its input and decision (its blocks' decisions are those
  // in `decisions`) and rendered (ExplainGroup) only when someone asks. Most decisions
  // are never read, and rendering every block's text took from a tenth (the planner's
  // stress case) to a third (a straggler) of the planner's time.
  struct Reasons {
    std::vector<std::string> before;
    GroupPlannerInput planned;  // no blocks: nothing planned (mode off, or it stopped short)
    GroupDecision decision;     // notes, failures, the policy; its blocks are moved out
    std::vector<std::string> after;
  };
  Reasons reasons;
  std::map<int32_t, BlockDecision> decisions;  // last, per block
  // What the step prediction adds to the decisions' blocks, as the round priced them.
  StepPricing pricing;
};

class DecisionLoop {
 public:
  // Everything given must outlive the loop.
  DecisionLoop(const DecisionLoopOptions& options, Clock* clock, GroupRegistry* registry,
               StragglerJudge* judge, const JobSettings* settings, SpeedModel* speeds);

  // Has the registry forget what was idle for forget_after (and the judge and the loop
  // with it), then plans every due group and pushes changed plans. Returns whether
  // anything was forgotten.
  bool Tick() ABSL_LOCKS_EXCLUDED(tick_mu_, mu_);
  // The job's groups (every group, for '') are due at the next Tick (a setting changed),
  // their flap counts cleared (an operator's change is no noise).
  void ReplanNow(const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);

  // The group's last decision; an empty record before its first.
  DecisionRecord Record(const GroupRef& ref) const ABSL_LOCKS_EXCLUDED(mu_);
  // The step the plan in force should take, from the last decision and `group`'s ranks.
  StepPrediction Prediction(const GroupSnapshot& group) const ABSL_LOCKS_EXCLUDED(mu_);

  int64_t decisions() const ABSL_LOCKS_EXCLUDED(mu_);
  // Wall time of each group's planning round since the last call (bounded).
  std::vector<double> TakeDecisionSeconds() ABSL_LOCKS_EXCLUDED(mu_);

  // The rank of `relieved` (those of TakesNoOffloads that own fewer units than calm:
  // throttled whole and resharded) whose own offloads this round refuses, or -1: one that
  // the pooled verdict calls straggling, or any where no rank straggles (`straggler` <
  // 0). Not where only other ranks straggle: their offloads among the others stay the
  // planner's (in a group of two, there are none). By the verdict's flags, not the
  // timers' target, so that two stragglers taking turns as the slowest do not switch the
  // refusal round by round.
  // (Public for its tests.)
  static int32_t RelievedSender(const PooledGroup& pooled, int32_t straggler,
                                const std::vector<int32_t>& relieved);

 private:
  struct Entry {
    uint64_t incarnation = 0;
    absl::Duration next_decision = absl::ZeroDuration();
    DecisionRecord record;
    PlanFlaps flaps;  // the group's plans undone soon after they changed
    // An operator changed a setting since the last round (ReplanNow): its change is
    // deliberate (GroupPlannerInput::deliberate).
    bool operator_changed = false;
  };
  // What one planning round decided: the record to keep, and the plan to publish.
  struct Outcome {
    DecisionRecord record;
    std::optional<WorkloadPlan> change;
    bool moves_units = false;
    std::vector<int32_t> relieved;  // GroupDecision's: the ranks a move takes units from
    // The step feedback moved its factor this round, or the offload check refused
    // offloads or allowed them again: a change is a probe (or the way back from one),
    // chosen on purpose, so no flap (plan_flaps.h). `probe`: what the loops did, when it
    // changed (for the log; empty otherwise).
    bool probed = false;
    std::string probe;
    // The judge treated the group as calm this round: a change that ends balancing ends
    // it for calm (plan_flaps.h: a blip when soon after it started).
    bool calm = false;
  };
  // What a group's flaps (plan_flaps.h) change in a round.
  struct Damping {
    DwellOptions dwell;         // the options', held longer while the group flaps
    std::string described;      // why (empty when it does not flap)
    absl::Duration start_wait;  // a straggler waited out before balancing starts
  };
  // Plans one group from its snapshot, on the last record's decisions. Takes no lock of
  // the registry's. `operator_changed`: Entry's.
  Outcome Decide(const GroupSnapshot& group, const JobPolicy& policy, Damping damping,
                 bool operator_changed, DecisionRecord last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The planner's input for the group's blocks (`input.blocks`), from the speed model's
  // estimates pooled per rank, the judge's verdict (which this updates; `start_wait`:
  // Damping's), the link's price, fixed costs, the step feedback's correction and
  // cordons, and the offload check's refusal, and what the step prediction adds to the
  // blocks (`pricing`); says what it found in `lines`. False, with
  // the reason in `lines`, while some rank has no estimate yet. `held`: the group's plan
  // is held (a flap hold, an operator's), so the step feedback does not probe;
  // `operator_hold`: an operator's (the offload check measures nothing).
  bool GatherInputs(const GroupSnapshot& group, const JobPolicy& policy, bool held,
                    bool operator_hold, absl::Duration start_wait, GroupPlannerInput& input,
                    std::vector<std::string>& lines, StepPricing& pricing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The same for a group an operator holds (JobSettings::HoldFor): the hold's plan,
  // whatever the speeds (DecideHeldGroup).
  Outcome DecideHeld(const GroupSnapshot& group, const JobPolicy& policy, const GroupHold& hold,
                     DecisionRecord last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The newest plan the group's attached workers report running: one an earlier
  // coordinator pushed, when newer than ours (we restarted and lost it).
  struct WorkersPlan {
    int64_t version = 0;
    int64_t number = 0;
  };
  static WorkersPlan WorkersRun(const GroupSnapshot& group);
  // Per rank in [0, size): whether an operator cordoned its device (JobSettings).
  std::vector<bool> CordonedRanks(const GroupSnapshot& group) const;
  // `plan` versioned and numbered to follow both ours and the workers'.
  WorkloadPlan Numbered(const GroupSnapshot& group, const WorkersPlan& workers,
                        WorkloadPlan plan) const;
  // Each rank's factor on its seconds per unit from the step feedback (empty when it is
  // off), for `straggler` (the timers' target: StragglerJudge::Verdict::straggler),
  // saying what it did in `lines` and in correction_. `held`: no probe.
  std::vector<double> StepCorrection(const GroupSnapshot& group, int32_t straggler, bool held,
                                     std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // Whether this round plans without offloads, for `straggler` (the timers' target in any
  // mode), saying why in `lines` and in correction_ (its undo and moved as the check
  // asks); `probing`: the check probes, so the step feedback must hold. Refused where the
  // offload check refuses them (offload_check.h; never when it is off or under a
  // `cordon`), and where `sender` >= 0 (RelievedSender): its own units are what the
  // planner would offload then, and offloads on top of a throttled rank's reshard ran
  // 7-19% slower than none in every offload check that measured them (the small GPT
  // under a 2x quota, docs/benchmarks.md 2026-12-05 (g); the ViT's 10-20%, 2026-11-29
  // (d)); the check can only refuse them after running them for its min_steps,
  // mispredicted. A further reshard, not offloads, relieves such a rank more.
  // `chronic`: the straggler is chronic for planning (OffloadCheck::Round::chronic).
  bool RefusesOffloads(const GroupSnapshot& group, int32_t straggler, bool chronic, int32_t sender,
                       bool operator_hold, bool cordon, std::vector<std::string>& lines,
                       bool& probing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // RefusesOffloads' first part: the offload check's round (false when it is off or
  // `cordon`), its undo and moved written to correction_.
  bool ChecksOffloads(const GroupSnapshot& group, int32_t straggler, bool chronic,
                      bool operator_hold, bool cordon, std::vector<std::string>& lines,
                      bool& probing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The ranks that take no offloads this round (PlannerRank::takes_no_offloads), saying so
  // in `lines`: those throttled whole and relieved of units (StragglerKind::
  // RelievedThrottled). Offloads would give such a rank work back on a split its reshard
  // made uneven: a throttled rank's transfers are throttled too, and once its contention
  // ended, its timers calling it calm, the planner balanced that split by offloading onto
  // it; computing its peer's units it timed 1.41x, so the recheck's calm spell restarted
  // and its units took 100 s to come back, the step 1.17-1.28x the calm one meanwhile
  // (docs/benchmarks.md, 2026-12-05). Its units come back by the recheck instead
  // (straggler_kind.h). In every round, calm or not. Its own offloads are refused in the
  // rounds where they are what the planner would choose (RefusesOffloads); the other
  // ranks' offloads among themselves stay the planner's.
  // None under an operator's hold (the plan is the operator's) or a cordon (a cordoned
  // rank's units may need every helper; the planner ignores the flag then too). Not for
  // a block planned by its loads (its replicas are weighed by loads, expert_plan.h).
  std::vector<int32_t> TakesNoOffloads(const GroupSnapshot& group, bool operator_hold, bool cordon,
                                       std::vector<std::string>& lines) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The kind of `straggler` (the timers' target; -1: none), measured by straggler_kind_
  // from the group's collectives and `pooled`'s timers, saying what it found in `lines`.
  StragglerKind::Kind KindOf(const GroupSnapshot& group, int32_t straggler, bool cordon,
                             const PooledGroup& pooled, double straggler_threshold,
                             std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // Prices a rank throttled whole as options_.throttled_price says (fixed_costs.h), saying
  // so in `lines`: `straggler`'s (the timers' target; -1: none), and, while its verdict
  // stands, one relieved of units that its timers call calm. By its step: its pooled
  // slowdown is raised to the one its step measured where its timers say less
  // (StragglerKind::StepSlowdown), so its units and its collectives follow it. By its
  // floor: its collectives are priced at their straggling floor
  // (StragglerKind::StragglingFloor), its units by its timers; only where the fixed costs
  // are balanced for the straggler's `kind`; such a rank's arrival spread, where fitted
  // (StragglerKind::ArrivalSpread: the straggler's, else a relieved rank's), goes to the
  // step prediction (`pricing`'s throttled_rank and arrival_spread). Not the straggler on
  // the calm split where its contention is gone (StragglerKind::ContentionGone): priced by
  // its timers. The ranks so priced, and the figures, are returned for FixedSecondsPerStep.
  ThrottledPriced PriceThrottled(const GroupSnapshot& group, int32_t straggler,
                                 StragglerKind::Kind kind, PooledGroup& pooled,
                                 StepPricing& pricing, std::vector<std::string>& lines) const;
  // Whether fixed costs are balanced for a straggler of `kind` (--fixed_costs).
  bool BalancesFixedCosts(StragglerKind::Kind kind) const;
  // Each rank's fixed seconds a step beyond the least (fixed_costs.h), from its recent
  // collective times and pooled slowdown (a rank in `throttled` as that says), indexed by
  // rank, where the options' mode and the straggler's `kind` say to balance them
  // (BalancesFixedCosts); sets `common` to the least and says what it found in `lines`.
  // Zeros (and `common` untouched) when none are balanced or nothing was measured.
  std::vector<double> FixedSecondsPerStep(const GroupSnapshot& group, const PooledGroup& pooled,
                                          StragglerKind::Kind kind,
                                          const ThrottledPriced& throttled,
                                          std::vector<std::string>& lines,
                                          std::optional<double>& common) const;
  // The group's entry, fresh for a new incarnation.
  Entry& EntryOf(const GroupRef& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DecisionLoopOptions options_;
  Clock* const clock_;
  GroupRegistry* const registry_;
  StragglerJudge* const judge_;
  const JobSettings* const settings_;
  std::unique_ptr<StepFeedback> feedback_;       // null: off
  std::unique_ptr<OffloadCheck> offload_check_;  // null: off
  StragglerKind straggler_kind_;
  SpeedModel* const speeds_;

  absl::Mutex tick_mu_;  // one planning round at a time: the judge's runs are per round
  // The planner's buffers, kept from one decision to the next (planner.h): the rounds are
  // serial, so one serves every group.
  PlannerWorkspace workspace_ ABSL_GUARDED_BY(tick_mu_);
  // The round's measured-step loops as StepCorrection and RefusesOffloads left them
  // (Decide and DecideHeld reset it, both read it): whether the step feedback's factors
  // moved or the offload check's refusal changed (a change chosen to be measured), whether
  // the plan in force must go (StepFeedback::Correction::undo, OffloadCheck::Verdict::undo),
  // and their lines saying why when there is news.
  struct RoundCorrection {
    bool moved = false;
    bool undo = false;
    std::string why;
  };
  RoundCorrection correction_ ABSL_GUARDED_BY(tick_mu_);
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(tick_mu_);
  std::map<GroupKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t decisions_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> decision_seconds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_DECISION_LOOP_H_
