// Coordinator: the cluster's decisions, free of gRPC (the services in agent_service.h and
// admin_service.h are thin glue over it). A facade that only wires its parts, one per
// concern, after Ray's GCS managers:
//
//   GroupRegistry   (group_registry.h)   agents, groups, ranks, shapes and reports; the
//                                        plan in force; forgetting idle groups
//   StragglerJudge  (straggler_judge.h)  the calm, marginal and chronic runs per group
//   DecisionLoop    (decision_loop.h)    each due group: snapshot -> planner -> plan
//   AdminReads      (admin_reads.h)      status, explanations, policies as read
//   JobSettings     (job_settings.h)     policies, pauses and cordons, stored
//
// Each part has its own lock, and none is held while another part's is taken except in
// one order (decision loop -> settings; registry -> speed model -> nothing), so planning
// never holds the registry's lock: agents' reports go on while groups are planned.
//
// Thread-safe: agent sessions, admin calls and the tick loop call in concurrently.
#ifndef BALLAST_COORDINATOR_COORDINATOR_H_
#define BALLAST_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ballast/v1/admin.pb.h"
#include "ballast/v1/agent.pb.h"
#include "common/clock.h"
#include "coordinator/admin_reads.h"
#include "coordinator/decision_loop.h"
#include "coordinator/group_registry.h"
#include "coordinator/job_settings.h"
#include "coordinator/link_model.h"
#include "coordinator/policy.h"
#include "coordinator/policy_store.h"
#include "coordinator/speed_model.h"
#include "coordinator/straggler_judge.h"
#include "coordinator/straggler_kind.h"

namespace ballast::coordinator {

struct CoordinatorOptions {
  // Link bandwidth assumed between ranks of a group, for the cost of an offload, until
  // the group's offload transfers have measured it (link_model.h): a prior.
  double link_bytes_per_second = 1e9;
  // A pair of ranks whose newest transfer sample is older than this is priced at its
  // fastest sample until offloads measure it again (link_model.h).
  absl::Duration link_stale_after = LinkModel::kDefaultStaleAfter;
  // The planner's dwell (DwellOptions in coordinator/planner/group_planner.h): for
  // plan_dwell after a change, a block's plan changes only for an improvement of at least
  // dwell_hysteresis.
  absl::Duration plan_dwell = absl::Seconds(2);
  double dwell_hysteresis = 0.3;
  // A plan that undoes the change before it within this long (beyond any hold in force)
  // is a flap, and the group's changes are then held this long by dwell_hysteresis,
  // doubling per further flap; one that calm ends that soon after balancing started (a
  // blip) is one too, and then a straggler must last twice as long as the blip balanced,
  // at most the hold (or turn chronic), before an all-local group balances again
  // (coordinator/planner/plan_flaps.h). 0: off.
  absl::Duration flap_hold = absl::Seconds(30);
  // How long a marginal straggler (within 1.3x at the default straggler threshold) must
  // last before a calm group that runs all-local starts balancing (rank_speeds.h); and a
  // marginal skew of an expert block's loads before its experts are split.
  absl::Duration marginal_straggler_for = absl::Seconds(3);
  // How long a straggle by a rank whose kind was measured before it began must last to be
  // chronic at once (StragglerJudge::KindMeasuredChronic): longer than the group's longest
  // blip about as slow (StragglerJudge::BlipToOutlast) of those that ended within
  // known_kind_blip_memory, kept within [min, max]; min where it has shown none. Checked
  // by Create: 0 <= min <= max, memory > 0.
  absl::Duration known_kind_wait_min = StragglerJudge::kKnownKindStraggleMin;
  absl::Duration known_kind_wait_max = StragglerJudge::kKnownKindStraggleMax;
  absl::Duration known_kind_blip_memory = StragglerJudge::kBlipMemory;
  // Balance each rank's collective time beyond the least with its units, as a fixed cost
  // (fixed_costs.h). The estimate assumes a straggler's collectives slow with its compute,
  // true of a CPU quota or a co-tenant, false of a slower device, where it reshards too
  // far; so by default (auto) only for a straggler whose collectives were measured slower
  // than the group's calm ones (straggler_kind.h). Off: block compute alone.
  FixedCostsMode fixed_costs = FixedCostsMode::kAuto;
  // How auto judges a straggler's kind (straggler_kind.h). Checked by Create
  // (ValidateStragglerKindOptions).
  StragglerKindOptions straggler_kind;
  // A straggler measured slow in its compute alone (a slower device, straggler_kind.h) is
  // chronic at once: its reshard is priced without waiting the job's reshard_after, which
  // still spaces the reshards (why, and what it measured: StragglerJudge::
  // KindMeasuredChronic).
  bool reshard_slower_devices = true;
  // The same for a straggler measured throttled whole, its collectives slowed with it (a
  // CPU quota, a co-tenant), whose offloads barely relieve it (the same comment). Off where
  // co-tenants come and go in less than the job's reshard_after: each would cost a move and
  // a move back.
  bool reshard_throttled_ranks = true;
  // A rank throttled whole that a reshard relieved too little (it still arrives last at
  // the collectives: straggler_kind.h, "Still last") is moved further without waiting
  // reshard_after since that reshard. Off: every move waits reshard_after after the last.
  bool reshard_still_last = true;
  // How a straggler measured throttled whole is priced (fixed_costs.h: timers, step,
  // floor): under a CPU quota its compute timers see a fraction of its slowdown
  // (straggler_kind.h, "Step slowdown"). By its timers, the small GPT's 2x quota
  // straggler kept 37% of the units where the best static plan leaves 25% (auto 1.205x
  // that plan). step and floor both left it 25%, but only floor predicted the steps
  // (plain TP's within 10% in every sample, step's in 46%; docs/benchmarks.md, 2026-12-04
  // (f)). floor prices a fixed cost: with fixed_costs off it prices nothing.
  ThrottledPrice throttled_price = ThrottledPrice::kFloor;
  // Price a rank's block compute as a fixed part plus a part per unit, fitted over the unit
  // counts it ran (unit_count_fit.h), so a unit moved is priced at what it saves.
  bool unit_count_fit = true;
  // Probe the straggler the compute timers judge with a factor on its speed, kept while
  // the measured step improves (step_feedback.h). Off by default: it shortened steps
  // 5-12% under a quota straggler and lengthened them 6-8% under a slower device
  // (docs/benchmarks.md, 2026-11-29). Checked by Create (ValidateStepFeedbackOptions).
  std::optional<StepFeedbackOptions> step_feedback;
  // Measure the straggler's offloads against the best plan without them and refuse them
  // where they are no faster (offload_check.h). On by default: under a CPU quota the
  // small GPT's offloads made its steps 6-30% longer than plain tensor parallelism's
  // (docs/benchmarks.md, 2026-12-02 (night)). Unset: off. Checked by Create
  // (ValidateOffloadCheckOptions).
  std::optional<OffloadCheckOptions> offload_check = OffloadCheckOptions{};
  // A group with no attached rank and no registration or report for this long is
  // forgotten: its ranks, plan, explanation and speed estimates (and so its metric
  // series). An agent disconnected this long is forgotten too. Policies, pauses and
  // cordons stay: an operator set them on purpose, they are configuration.
  absl::Duration forget_after = absl::Minutes(10);
  // What one agent may announce: attached workers, and the distinct groups and jobs they
  // belong to. Past a cap the hello or the join is refused (RESOURCE_EXHAUSTED), so one
  // agent cannot spend the coordinator's memory.
  int32_t max_workers_per_agent = 1024;
  int32_t max_groups_per_agent = 256;
  int32_t max_jobs_per_agent = 64;
  // What one worker identity may announce (ShapeLimits in proto/validate.h): past a limit
  // the hello or the join is refused (INVALID_ARGUMENT naming it).
  int32_t max_units_per_block = ShapeLimits{}.max_units_per_block;
  int32_t max_blocks_per_worker = ShapeLimits{}.max_blocks_per_worker;
  // What the block shapes of one agent's attached workers may make the coordinator hold
  // (4 bytes a unit); past it, RESOURCE_EXHAUSTED. With the gRPC server's message-size cap
  // (ServerOptions::max_message_bytes), the bound on what one agent session can cost.
  int64_t max_shape_bytes_per_agent = int64_t{64} << 20;
};

// Counters for metrics and tests.
struct CoordinatorCounters {
  int64_t reports_accepted = 0;
  int64_t reports_rejected = 0;
  int64_t reports_dropped_by_agents = 0;
  int64_t plans_pushed = 0;
  int64_t plan_changes = 0;
  int64_t decisions = 0;
  int64_t groups_forgotten = 0;
  int64_t agents_forgotten = 0;
};

// Durations observed since the last TakeObservations(), for histograms. Bounded: when
// nobody drains them, the oldest are dropped.
struct CoordinatorObservations {
  // From a plan's decision until every attached rank of its group reported a step that
  // ran under it (the control loop's actuation latency).
  std::vector<double> plan_latency_seconds;
  // Wall time of one group's planning round (speed estimates + planner).
  std::vector<double> decision_seconds;
};

class Coordinator {
 public:
  // `clock`, `store` and `speeds` must outlive the coordinator. Loads policies, pauses and
  // cordons from the store.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(const CoordinatorOptions& options,
                                                             Clock* clock, PolicyStore* store,
                                                             SpeedModel* speeds);

  // --- Agents (from AgentService): GroupRegistry. ---
  absl::Status AgentConnected(const v1::AgentHello& hello, AgentSink* sink) {
    return registry_.AgentConnected(hello, sink);
  }
  void AgentDisconnected(const std::string& agent_id, AgentSink* sink) {
    registry_.AgentDisconnected(agent_id, sink);
  }
  absl::Status WorkerJoined(const std::string& agent_id, const v1::WorkerIdentity& worker) {
    return registry_.WorkerJoined(agent_id, worker);
  }
  absl::Status WorkerLeft(const std::string& agent_id, const v1::WorkerIdentity& worker) {
    return registry_.WorkerLeft(agent_id, worker);
  }
  absl::Status Report(const std::string& agent_id, const v1::WorkerReport& report) {
    return registry_.Report(agent_id, report);
  }
  void AgentDroppedReports(int64_t dropped) { registry_.AgentDroppedReports(dropped); }

  // --- The decision loop. ---
  // Plans every group whose report period has elapsed; pushes changed plans. Forgets
  // groups and agents idle for forget_after, and hands the memory they held back.
  void Tick();

  // --- Admin (from AdminService): AdminReads and JobSettings. ---
  absl::StatusOr<v1::ClusterStatus> Status(const std::string& job) const {
    return reads_.Status(job);
  }
  absl::StatusOr<JobPolicy> GetPolicy(const std::string& job) const {
    return reads_.GetPolicy(job);
  }
  absl::Status CheckJobKnown(const std::string& job) const { return reads_.CheckJobKnown(job); }
  absl::StatusOr<v1::Explanation> Explain(const std::string& job, const std::string& group) const {
    return reads_.Explain(job, group);
  }
  // Each re-plans the groups it concerns at the next Tick.
  absl::Status SetPolicy(const std::string& job, const JobPolicy& policy);
  absl::Status SetPaused(const std::string& job, bool paused);
  // Uncordoning a device that is not cordoned is NOT_FOUND.
  absl::Status SetCordon(const std::string& device, bool cordoned, const std::string& reason);
  // Holds a registered group at a fixed plan (held_plan.h), or releases it (nullopt):
  // NOT_FOUND for a group the coordinator does not know, or releasing one not held;
  // INVALID_ARGUMENT naming the field for a hold its group cannot take.
  absl::Status SetHold(const std::string& job, const std::string& group,
                       const std::optional<GroupHold>& hold);

  CoordinatorObservations TakeObservations();
  CoordinatorCounters counters() const;
  int32_t connected_agents() const { return registry_.connected_agents(); }
  int32_t attached_workers() const { return registry_.attached_workers(); }

 private:
  Coordinator(const CoordinatorOptions& options, Clock* clock, SpeedModel* speeds,
              std::unique_ptr<JobSettings> settings);

  Clock* const clock_;
  // Wired in this order: each part is built on those above it.
  const std::unique_ptr<JobSettings> settings_;
  GroupRegistry registry_;
  StragglerJudge judge_;
  DecisionLoop loop_;
  AdminReads reads_;

  // Freed memory goes back to the system at most this often (a trim walks every arena).
  static constexpr absl::Duration kTrimInterval = absl::Seconds(10);
  absl::Mutex trim_mu_;
  absl::Duration next_trim_ ABSL_GUARDED_BY(trim_mu_);
  bool trim_pending_ ABSL_GUARDED_BY(trim_mu_) = false;  // forgotten since the last trim
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_COORDINATOR_H_
