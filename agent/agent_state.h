// AgentState: what one node's agent knows, shared by the worker-facing service (one
// stream per training process) and the coordinator session (one stream per agent).
//
// - workers: who is attached, and the channel to reach each;
// - reports: a bounded queue of step reports bound for the coordinator; when it is full
//   the oldest are dropped and counted, so a slow coordinator never blocks a worker;
// - plans: the newest plan per (job, group), relayed to the group's workers at once and
//   replayed to workers that attach later;
// - worker changes, queued for the coordinator session (superseded by `hello` on every
//   reconnect).
#ifndef BALLAST_AGENT_AGENT_STATE_H_
#define BALLAST_AGENT_AGENT_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ballast/v1/agent.pb.h"
#include "ballast/v1/worker.pb.h"

namespace ballast::agent {

// The way to one attached worker. Implementations must be thread-safe.
class WorkerChannel {
 public:
  virtual ~WorkerChannel() = default;
  // False when the worker is gone.
  virtual bool Send(const v1::WorkerDirective& directive) = 0;
};

struct AgentStats {
  int64_t workers = 0;
  int64_t reports_queued = 0;
  int64_t reports_dropped = 0;
  int64_t reports_rejected = 0;
  int64_t plans_relayed = 0;
};

class AgentState {
 public:
  explicit AgentState(int32_t report_capacity) : report_capacity_(report_capacity) {}

  // INVALID_ARGUMENT naming the field for an unusable identity; ALREADY_EXISTS when the
  // (job, group, rank) is attached already. Sends the group's newest plan, if any.
  absl::Status AddWorker(const v1::WorkerIdentity& identity, WorkerChannel* channel);
  void RemoveWorker(WorkerChannel* channel);
  std::vector<v1::WorkerIdentity> Workers() const;

  // INVALID_ARGUMENT when a timing is not finite or negative (counted, not queued).
  absl::Status EnqueueReport(const v1::WorkerIdentity& from, const v1::StepReport& report);
  // Takes up to `max` queued reports, with the drop count since the last batch.
  v1::ReportBatch TakeReports(int32_t max);
  // Worker joined/left events since the last call.
  std::vector<v1::AgentMessage> TakeWorkerEvents();
  // Forgets pending events (a fresh hello describes every worker).
  void ClearWorkerEvents();

  // Relays a plan from the coordinator to the workers of its group.
  void DeliverPlan(const v1::GroupPlan& plan);

  AgentStats stats() const;

 private:
  using GroupKey = std::pair<std::string, std::string>;  // job, group
  struct Attached {
    v1::WorkerIdentity identity;
    WorkerChannel* channel;
  };

  const int32_t report_capacity_;
  mutable absl::Mutex mu_;
  std::vector<Attached> workers_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::WorkerReport> reports_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_since_batch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::AgentMessage> events_ ABSL_GUARDED_BY(mu_);
  std::map<GroupKey, v1::WorkloadPlan> plans_ ABSL_GUARDED_BY(mu_);
  AgentStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_AGENT_STATE_H_
