// Coordinator: the cluster's decisions, free of gRPC (the services in agent_service.h and
// admin_service.h are thin glue over it).
//
// It keeps the registry (jobs, TP groups, ranks, devices, agents), feeds worker timings to
// the speed model, and on every Tick() plans each group whose report period has elapsed:
// per block, the planner turns the ranks' measured speeds into prune / offload / reshard
// counts under the job's policy. A plan that differs from the one in force gets a new
// version and is pushed to every agent hosting a rank of the group.
//
// Plan versions are wall-clock microseconds (strictly increasing per group), so they stay
// newer than anything a worker holds even after the coordinator restarts without state.
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
#include "ballast/plan.h"
#include "ballast/v1/admin.pb.h"
#include "ballast/v1/agent.pb.h"
#include "common/clock.h"
#include "coordinator/link_model.h"
#include "coordinator/planner/group_planner.h"
#include "coordinator/planner/planner.h"
#include "coordinator/policy.h"
#include "coordinator/policy_store.h"
#include "coordinator/rank_speeds.h"
#include "coordinator/speed_model.h"

namespace ballast::coordinator {

// Where an agent's session delivers what the coordinator sends. Thread-safe.
class AgentSink {
 public:
  virtual ~AgentSink() = default;
  virtual void Send(const v1::CoordinatorMessage& message) = 0;
};

struct CoordinatorOptions {
  // Link bandwidth assumed between ranks of a group, for the cost of an offload, until
  // the group's offload transfers have measured it (link_model.h): a prior.
  double link_bytes_per_second = 1e9;
  // A pair of ranks whose newest transfer sample is older than this is priced at its
  // fastest sample until offloads measure it again (link_model.h).
  absl::Duration link_stale_after = LinkModel::kDefaultStaleAfter;
  // Reports in one batch beyond this are refused (a bound on one message's work).
  int32_t max_reports_per_batch = 100000;
  // The planner's dwell (DwellOptions in coordinator/planner/group_planner.h): for
  // plan_dwell after a change, a block's plan changes only for an improvement of at least
  // dwell_hysteresis.
  absl::Duration plan_dwell = absl::Seconds(2);
  double dwell_hysteresis = 0.3;
  // How long a marginal straggler (within 1.3x at the default straggler threshold) must
  // last before a calm group that runs all-local starts balancing (rank_speeds.h).
  absl::Duration marginal_straggler_for = absl::Seconds(3);
  // Balance each rank's collective time beyond the least with its units, as a fixed cost
  // (fixed_costs.h). Off (the default): the planner balances block compute alone. Off by
  // default because the estimate assumes a straggler's collectives slow with its compute,
  // and on the e2e benchmark, where they do, it measured no gain beyond the noise
  // (docs/benchmarks.md, 2026-11-26).
  bool fixed_costs = false;
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

  // --- Agents (from AgentService). ---
  // Registers the agent and its workers (replacing an earlier session of the same id), and
  // sends it the plans in force for its workers' groups.
  absl::Status AgentConnected(const v1::AgentHello& hello, AgentSink* sink);
  // Forgets the session if it is still the agent's current one; its workers stay known
  // (marked detached) so their groups keep their plans across an agent restart.
  void AgentDisconnected(const std::string& agent_id, AgentSink* sink);
  absl::Status WorkerJoined(const std::string& agent_id, const v1::WorkerIdentity& worker);
  absl::Status WorkerLeft(const std::string& agent_id, const v1::WorkerIdentity& worker);
  // NOT_FOUND for an unknown job, group or rank; INVALID_ARGUMENT naming the field for bad
  // numbers. Nothing changes on error.
  absl::Status Report(const std::string& agent_id, const v1::WorkerReport& report);
  void AgentDroppedReports(int64_t dropped);

  // --- The decision loop. ---
  // Plans every group whose report period has elapsed; pushes changed plans. Forgets
  // groups and agents idle for forget_after.
  void Tick();

  // --- Admin (from AdminService). ---
  absl::StatusOr<v1::ClusterStatus> Status(const std::string& job) const;
  absl::StatusOr<JobPolicy> GetPolicy(const std::string& job) const;
  // OK when the job has workers, a policy or a pause; NOT_FOUND naming it otherwise (the
  // admin API refuses to configure unknown jobs unless asked to preconfigure).
  absl::Status CheckJobKnown(const std::string& job) const;
  absl::Status SetPolicy(const std::string& job, const JobPolicy& policy);
  absl::Status SetPaused(const std::string& job, bool paused);
  // Uncordoning a device that is not cordoned is NOT_FOUND.
  absl::Status SetCordon(const std::string& device, bool cordoned, const std::string& reason);
  absl::StatusOr<v1::Explanation> Explain(const std::string& job, const std::string& group) const;

  CoordinatorObservations TakeObservations() ABSL_LOCKS_EXCLUDED(mu_);
  CoordinatorCounters counters() const;
  int32_t connected_agents() const;
  int32_t attached_workers() const;

 private:
  // The last kStepWindow values of one per-step figure, for medians: one step's compute
  // or collective time swings too much to predict or show on its own.
  static constexpr size_t kStepWindow = 16;
  struct RecentSeconds {
    std::vector<double> values;  // at most kStepWindow, oldest overwritten first
    size_t next = 0;
    void Add(double seconds);
    double Median() const;  // 0 when empty
  };
  struct RankEntry {
    v1::WorkerIdentity identity;
    std::string agent_id;
    bool attached = false;
    // From its latest report, summed over blocks: compute, and collectives (with agreement).
    double last_compute_seconds = 0;
    double last_collective_seconds = 0;
    // The same over its recent reports: collectives alone, and compute + collectives.
    RecentSeconds collective_seconds;
    RecentSeconds step_seconds;
    int64_t last_plan_version = 0;  // the plan its latest report ran under
    int64_t last_plan_number = 0;   // and that plan's number
    // Monotonic time of the first planning round of the rank's current run of rounds
    // straggling, pooled over the group's blocks (rank_speeds.h); unset when it does not.
    // Status shows it (transient, then chronic after reshard_after); the count to chronic
    // for planning restarts at a reshard too (GroupEntry::moved_units_at).
    std::optional<absl::Duration> straggling_since;
    // Monotonic time of the last planning round that judged the rank: a gap of more than
    // kJudgementGapPeriods report periods (a pause, a detach, missing reports) breaks a run
    // of straggling rounds.
    std::optional<absl::Duration> judged_at;
    // The step of the last report whose link samples were taken (link_model.h).
    int64_t last_link_sample_step = -1;
  };
  static constexpr int kJudgementGapPeriods = 3;
  struct BlockEntry {
    int32_t num_units = 0;
    int64_t unit_bytes = 0;
    // Micro-batches a step, from the latest report that ran a Backward: an offloaded unit
    // moves its bytes out once a step and back this many times (1 until a report says).
    int32_t micro_batches = 1;
    // What the workers run: set by the first worker to register the block, then by the
    // reports that follow a reshard (their only writers). The ownership the group plans on
    // is PlannedOwnership: the plan in force's move, until a worker reports it.
    std::vector<RankId> owner_of_unit;
  };
  struct GroupEntry {
    std::string job;
    std::string name;
    int32_t size = 0;
    std::map<int32_t, RankEntry> ranks;
    std::map<int32_t, BlockEntry> blocks;
    WorkloadPlan plan;  // in force (version 0: none pushed yet)
    std::map<int32_t, BlockDecision> decisions;  // last, per block
    // Why the last decision came out as it did: lines the coordinator wrote (the speeds'
    // verdict, chronic ranks, the link; `before`, then `after`: the step prediction),
    // around what the planner decided, kept as its input and decision (its blocks'
    // decisions are those in `decisions`) and rendered (ExplainGroup) only when someone
    // asks. Most decisions are never read, and rendering every block's text took from a
    // tenth (the planner's stress case) to a third (a straggler) of the planner's time.
    struct Reasons {
      std::vector<std::string> before;
      GroupPlannerInput planned;  // no blocks: nothing planned (mode off, or it stopped short)
      GroupDecision decision;     // notes, failures, the policy; its blocks are moved out
      std::vector<std::string> after;
    };
    Reasons reasons;
    absl::Duration next_decision = absl::ZeroDuration();
    // Set when a new plan is pushed, until every attached rank reports a step under it.
    std::optional<absl::Time> plan_pushed_at;
    // Monotonic time of the last plan change (none yet: no dwell).
    std::optional<absl::Duration> plan_changed_at;
    // The rounds in a row with a marginal straggler (rank_speeds.h: TreatAsCalm).
    RoundRun marginal;
    // The rounds in a row with a calm pooled verdict: an uneven split goes back to even
    // only after reshard_after of them (PlannerInput::calm_lasted).
    RoundRun calm;
    // Monotonic time of the last pushed plan that moved units: a rank counts as chronic,
    // for planning, only after reshard_after of straggling since then too.
    std::optional<absl::Duration> moved_units_at;
    // Link speeds learned from the ranks' offload transfers.
    LinkModel links;
    // The collectives' own cost a step that the last decision left out of the planner's
    // fixed costs (FixedCosts::common; written only by Decide), for the step prediction;
    // unset when it gave none (mode off, --fixed_costs=false, nothing measured).
    std::optional<double> common_fixed_seconds;
    // Monotonic time of the last registration, report or detach (forget_after runs
    // from it once no rank is attached).
    absl::Duration last_activity = absl::ZeroDuration();
  };
  struct AgentEntry {
    std::string node;
    AgentSink* sink = nullptr;  // null while disconnected
    absl::Duration disconnected_at = absl::ZeroDuration();  // monotonic
  };
  using GroupKey = std::pair<std::string, std::string>;

  Coordinator(const CoordinatorOptions& options, Clock* clock, PolicyStore* store,
              SpeedModel* speeds);
  absl::Status LoadFromStore();
  absl::Status RegisterWorker(const std::string& agent_id, const v1::WorkerIdentity& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when `workers` (all of one agent's) pass a per-agent cap.
  absl::Status CheckAgentCaps(const std::string& agent_id,
                              const std::vector<const v1::WorkerIdentity*>& workers) const;
  // Detaches every rank the agent has attached (its session ended or was replaced).
  void DetachRanksOf(const std::string& agent_id, absl::Duration now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Attached workers of an agent, as registered.
  std::vector<const v1::WorkerIdentity*> AttachedWorkers(const std::string& agent_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns whether it forgot anything.
  bool ForgetIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DecideDueGroups() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobPolicy PolicyFor(const std::string& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Paused(const std::string& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans one group; returns the plan to push, if it changed.
  std::optional<WorkloadPlan> Decide(GroupEntry& group, const JobPolicy& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Push(const GroupEntry& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The step the plan in force should take, as blocks (the planner's per-block
  // predictions, summed: compute, and each rank's fixed cost beyond the least) and
  // collectives (what they cost once nobody waits for a peer: the least fixed cost the
  // last decision estimated, else the smallest median collective time over the ranks).
  struct StepPrediction {
    double blocks = 0;
    double collectives = 0;
  };
  static StepPrediction PredictStep(const GroupEntry& group);
  // Each rank's fixed seconds a step beyond the least (fixed_costs.h), from its recent
  // collective times and pooled slowdown, indexed by rank; sets `common` to the least and
  // says what it found in `lines`. Zeros (and `common` untouched) when
  // options_.fixed_costs is off or nothing was measured.
  std::vector<double> FixedSecondsPerStep(const GroupEntry& group, const PooledGroup& pooled,
                                          std::vector<std::string>& lines,
                                          std::optional<double>& common) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bytes per second an offload is priced at: the group's slowest learned link, else
  // options_.link_bytes_per_second. `explanation` (when not null) says which.
  double LinkBytesPerSecond(const GroupEntry& group, std::string* explanation) const;
  static void Observe(std::vector<double>& samples, double seconds);
  int64_t NextVersion(const GroupEntry& group) const;
  // Updates each rank's run of pooled straggling rounds (RankEntry::straggling_since) with
  // the round judged at monotonic time `judged_now`, and returns, per rank, whether it is
  // chronic for planning: straggling for the policy's reshard_after, counted from the last
  // reshard if later. Appends explain lines.
  std::vector<bool> JudgeChronic(GroupEntry& group, const PooledGroup& pooled,
                                 const JobPolicy& policy, absl::Duration judged_now,
                                 std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ownership a block is planned on: the plan in force's, where it moves the block's
  // units (restated until confirmed), else what the workers run.
  static const std::vector<RankId>& PlannedOwnership(const GroupEntry& group, int32_t block_id);
  // Feeds an accepted report's transfer samples to its group's LinkModel.
  void AddLinkSamples(const v1::WorkerReport& report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Clock* const clock_;
  PolicyStore* const store_;
  SpeedModel* const speeds_;

  mutable absl::Mutex mu_;
  std::map<GroupKey, GroupEntry> groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AgentEntry> agents_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, JobPolicy> policies_ ABSL_GUARDED_BY(mu_);  // cache of the store
  std::map<std::string, bool> paused_ ABSL_GUARDED_BY(mu_);         // "" = cluster
  std::map<std::string, std::string> cordons_ ABSL_GUARDED_BY(mu_);  // device -> reason
  CoordinatorCounters counters_ ABSL_GUARDED_BY(mu_);
  CoordinatorObservations observations_ ABSL_GUARDED_BY(mu_);
  // Freed memory goes back to the system at most this often (a trim walks every arena).
  static constexpr absl::Duration kTrimInterval = absl::Seconds(10);
  absl::Duration next_trim_ ABSL_GUARDED_BY(mu_);
  bool trim_pending_ ABSL_GUARDED_BY(mu_) = false;  // forgotten since the last trim
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_COORDINATOR_H_
