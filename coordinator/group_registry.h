// GroupRegistry: who is registered with the coordinator (agents, and the jobs, TP groups,
// ranks and block shapes their workers announced), what the ranks last reported, the plan
// in force per group, and forgetting what has been idle for forget_after. The part of the
// coordinator that agent sessions write to (Ray's GCS node and job managers, in one).
//
// Every call takes the registry's one lock once: a call validates what it was given
// before the lock (names, numbers, shapes against ShapeLimits), then checks it against
// the registry and updates under the lock, so a group cannot be forgotten half-way
// through a report. Planning never runs under this lock: the decision loop takes a
// Snapshot, plans on it, and Publishes the plan, which is dropped if the group was
// forgotten meanwhile (a group registered again is a new incarnation).
//
//   GroupRegistry registry(options, clock, speeds);
//   registry.AgentConnected(hello, sink);           // registers, replays plans in force
//   registry.Report(agent_id, report);              // checked against the group's shape
//   std::optional<GroupSnapshot> s = registry.Snapshot(key, /*with_ownership=*/true);
//   registry.Publish(s->ref, plan);                  // pushes to the group's agents
#ifndef BALLAST_COORDINATOR_GROUP_REGISTRY_H_
#define BALLAST_COORDINATOR_GROUP_REGISTRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ballast/plan.h"
#include "ballast/v1/agent.pb.h"
#include "common/clock.h"
#include "coordinator/link_model.h"
#include "coordinator/speed_model.h"
#include "proto/validate.h"

namespace ballast::coordinator {

// Where an agent's session delivers what the coordinator sends. Thread-safe; Send must
// not wait on the network (the registry calls it under its lock).
class AgentSink {
 public:
  virtual ~AgentSink() = default;
  virtual void Send(const v1::CoordinatorMessage& message) = 0;
};

using GroupKey = std::pair<std::string, std::string>;  // job, group

// A group as registered once: forgotten and registered again, it is another incarnation,
// and nothing decided for the old one applies to it.
struct GroupRef {
  GroupKey key;
  uint64_t incarnation = 0;
  friend bool operator==(const GroupRef&, const GroupRef&) = default;
};

struct RegistryOptions {
  absl::Duration link_stale_after = LinkModel::kDefaultStaleAfter;
  absl::Duration forget_after = absl::Minutes(10);
  ShapeLimits shape;
  int32_t max_workers_per_agent = 1024;
  int32_t max_groups_per_agent = 256;
  int32_t max_jobs_per_agent = 64;
  // What the block shapes one agent's workers announce may make the registry hold
  // (4 bytes a unit), summed over its attached workers.
  int64_t max_shape_bytes_per_agent = int64_t{64} << 20;
};

struct RegistryCounters {
  int64_t reports_accepted = 0;
  int64_t reports_rejected = 0;
  int64_t reports_dropped_by_agents = 0;
  int64_t plans_pushed = 0;
  int64_t plan_changes = 0;
  int64_t groups_forgotten = 0;
  int64_t agents_forgotten = 0;
};

// What the decision loop and the admin reads see of a rank.
struct RankSnapshot {
  int32_t rank = 0;
  bool attached = false;
  std::string device;
  std::string node;
  // From its latest report, summed over blocks: compute, and collectives (with agreement).
  double last_compute_seconds = 0;
  double last_collective_seconds = 0;
  // Units its latest report computed, over its blocks; -1 before any report. 0: the plan
  // it runs gives all its units away (a cordon, a hold), so it measures no speed.
  int64_t last_units_computed = -1;
  // Medians over its recent reports: collectives alone (of collective_samples), and
  // compute + collectives.
  double collective_median = 0;
  size_t collective_samples = 0;
  double step_median = 0;
  // The same over its last steps under the plan of its latest report only (at most 16:
  // the step feedback judges a plan by them), and how many steps it ran under that plan.
  double plan_step_median = 0;
  double plan_collective_median = 0;
  int64_t plan_steps = 0;
  int64_t last_plan_version = 0;  // the plan its latest report ran under
  int64_t last_plan_number = 0;   // and that plan's number
};

struct BlockSnapshot {
  int32_t block = 0;
  int32_t num_units = 0;
  int64_t unit_bytes = 0;
  // Micro-batches a step, from the latest report that ran a Backward: an offloaded unit
  // moves its bytes out once a step and back this many times (1 until a report says).
  int32_t micro_batches = 1;
  // Its units' work divides (BlockInfo.units_divide: a mixture of experts' experts).
  bool units_divide = false;
  // Such a block's token loads, the next step's prediction: per unit, the tokens a step's
  // Forwards route there, smoothed over the steps reported (each step's counts summed over
  // its Forwards, then averaged with the prediction so far, half and half: a learned
  // router's loads jitter from step to step, and planning on one step's flapped replicas
  // on and off), and how many Forwards the last step had. Every rank routes alike, so one
  // rank's reports give them (another's once it detaches). Empty: none yet.
  std::vector<double> unit_tokens;
  int32_t token_forwards = 0;
  // What the workers run (empty unless the snapshot was taken with_ownership).
  std::vector<RankId> owner_of_unit;
  // The plan in force states this block's ownership and it is what the workers run: a
  // reshard they have made (the coordinator's plan goes on stating it until the group's
  // next change; plan.h, MoveMade). Set with or without ownership (status reads it
  // "reshard (made)").
  bool move_made = false;
};

struct GroupSnapshot {
  GroupRef ref;
  std::string job;
  std::string name;
  int32_t size = 0;
  std::vector<RankSnapshot> ranks;    // registered, by rank
  std::vector<BlockSnapshot> blocks;  // by block id
  WorkloadPlan plan;                  // in force (version 0: none pushed yet)
  // Monotonic time of the last plan change (none yet: no dwell).
  std::optional<absl::Duration> plan_changed_at;
  // The slowest learned link at the snapshot's time (link_model.h), and its staleness bound.
  std::optional<LinkModel::Estimate> link;
  absl::Duration link_stale_after;
};

class GroupRegistry {
 public:
  // `clock` and `speeds` must outlive the registry; `options` are validated by the caller.
  GroupRegistry(const RegistryOptions& options, Clock* clock, SpeedModel* speeds);

  // Registers the agent and its workers (replacing an earlier session of the same id), and
  // sends it the plans in force for its workers' groups. Refused whole: INVALID_ARGUMENT
  // for a bad identity (naming the field or the shape limit), RESOURCE_EXHAUSTED past a
  // per-agent cap.
  absl::Status AgentConnected(const v1::AgentHello& hello, AgentSink* sink);
  // Forgets the session if it is still the agent's current one; its workers stay known
  // (marked detached) so their groups keep their plans across an agent restart.
  void AgentDisconnected(const std::string& agent_id, AgentSink* sink);
  absl::Status WorkerJoined(const std::string& agent_id, const v1::WorkerIdentity& worker);
  absl::Status WorkerLeft(const std::string& agent_id, const v1::WorkerIdentity& worker);
  // NOT_FOUND for an unknown job, group, rank or block; INVALID_ARGUMENT naming the field
  // for bad numbers or ownership. Nothing changes in the registry on error.
  absl::Status Report(const std::string& agent_id, const v1::WorkerReport& report);
  void AgentDroppedReports(int64_t dropped);

  // Forgets groups with no attached rank and no activity for forget_after (and their speed
  // estimates), and agents disconnected that long.
  struct Forgotten {
    std::vector<GroupRef> groups;
    int64_t agents = 0;
  };
  Forgotten ForgetIdle();

  // Every group, in key order.
  std::vector<GroupRef> Groups() const;
  // A copy of what the registry knows of one group; nullopt when it is not registered.
  // The workers' ownership is copied only `with_ownership` (planning needs it; status
  // does not, and it can be megabytes).
  std::optional<GroupSnapshot> Snapshot(const GroupKey& key, bool with_ownership) const;
  // Snapshots without ownership of every group of `job` ('' = all), in key order.
  std::vector<GroupSnapshot> Snapshots(const std::string& job) const;
  // Makes `plan` the group's plan in force and pushes it to every agent hosting one of its
  // ranks. False (nothing done) when `ref` is no longer registered: forgotten meanwhile,
  // or registered again since (another incarnation).
  bool Publish(const GroupRef& ref, const WorkloadPlan& plan);

  bool HasJob(const std::string& job) const;
  int32_t connected_agents() const;
  int32_t attached_workers() const;
  RegistryCounters counters() const;
  // Plan latencies observed since the last call: from a plan's push until every attached
  // rank of its group reported a step under it. Bounded (the newest kept).
  std::vector<double> TakePlanLatencies();

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
    // As registered, without its blocks: their shape is the group's (BlockEntry), and a
    // copy per rank would double what a large hello costs.
    v1::WorkerIdentity identity;
    int64_t shape_bytes = 0;  // what its announced blocks count against its agent's cap
    std::string agent_id;
    bool attached = false;
    double last_compute_seconds = 0;
    double last_collective_seconds = 0;
    int64_t last_units_computed = -1;
    RecentSeconds collective_seconds;
    RecentSeconds step_seconds;
    RecentSeconds plan_step_seconds;        // since last_plan_version began
    RecentSeconds plan_collective_seconds;  // the same, collectives alone
    int64_t plan_steps = 0;
    int64_t last_plan_version = 0;
    int64_t last_plan_number = 0;
    // The step of the last report whose link samples were taken (link_model.h).
    int64_t last_link_sample_step = -1;
  };
  struct BlockEntry {
    int32_t num_units = 0;
    int64_t unit_bytes = 0;
    int32_t micro_batches = 1;
    bool units_divide = false;
    // The smoothed token loads (BlockSnapshot::unit_tokens).
    std::vector<double> unit_tokens;
    int32_t token_forwards = 0;
    int64_t tokens_step = -1;
    int32_t tokens_rank = -1;  // whose reports give them (-1: none yet)
    // What the workers run: set by the first worker to register the block, then by the
    // reports that follow a reshard (their only writers).
    std::vector<RankId> owner_of_unit;
  };
  struct GroupEntry {
    uint64_t incarnation = 0;
    std::string job;
    std::string name;
    int32_t size = 0;
    std::map<int32_t, RankEntry> ranks;
    std::map<int32_t, BlockEntry> blocks;
    WorkloadPlan plan;  // in force (version 0: none pushed yet)
    // Set when a new plan is pushed, until every attached rank reports a step under it.
    std::optional<absl::Time> plan_pushed_at;
    std::optional<absl::Duration> plan_changed_at;  // monotonic
    LinkModel links;                                // learned from the ranks' offload transfers
    // Monotonic time of the last registration, report or detach (forget_after runs
    // from it once no rank is attached).
    absl::Duration last_activity = absl::ZeroDuration();
  };
  struct AgentEntry {
    std::string node;
    AgentSink* sink = nullptr;                              // null while disconnected
    absl::Duration disconnected_at = absl::ZeroDuration();  // monotonic
  };
  // One worker as its agent's caps count it.
  struct CappedWorker {
    std::string job, group;
    int32_t rank = 0;
    int64_t shape_bytes = 0;
  };

  static int64_t ShapeBytes(const v1::WorkerIdentity& worker);
  // RESOURCE_EXHAUSTED when `workers` (all of one agent's) pass a per-agent cap.
  absl::Status CheckAgentCaps(const std::string& agent_id,
                              const std::vector<CappedWorker>& workers) const;
  // INVALID_ARGUMENT when `worker` disagrees with its registered group's size.
  absl::Status CheckFitsGroup(const v1::WorkerIdentity& worker) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `worker` was validated and checked to fit its group.
  void RegisterWorker(const std::string& agent_id, const v1::WorkerIdentity& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DetachRanksOf(const std::string& agent_id, absl::Duration now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<CappedWorker> AttachedWorkers(const std::string& agent_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void SendPlan(const GroupEntry& group, AgentSink* sink) const;
  void Push(const GroupEntry& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  GroupSnapshot SnapshotOf(const GroupEntry& group, bool with_ownership) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Applies an accepted report (checked against the group's shape) to the group.
  void Apply(GroupEntry& group, RankEntry& rank, const v1::WorkerReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RegistryOptions options_;
  Clock* const clock_;
  SpeedModel* const speeds_;

  mutable absl::Mutex mu_;
  std::map<GroupKey, GroupEntry> groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AgentEntry> agents_ ABSL_GUARDED_BY(mu_);
  uint64_t next_incarnation_ ABSL_GUARDED_BY(mu_) = 1;
  RegistryCounters counters_ ABSL_GUARDED_BY(mu_);
  std::vector<double> plan_latencies_ ABSL_GUARDED_BY(mu_);
};

// Appends `seconds` to `samples`, dropping the oldest beyond a bound (in case nothing
// drains them: no metrics endpoint).
void ObserveBounded(std::vector<double>& samples, double seconds);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_GROUP_REGISTRY_H_
