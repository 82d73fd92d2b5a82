#include "agent/agent_state.h"

#include "absl/strings/str_cat.h"
#include "proto/validate.h"

namespace ballast::agent {

absl::Status AgentState::AddWorker(const v1::WorkerIdentity& identity, WorkerChannel* channel) {
  if (absl::Status s = ValidateIdentity(identity); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const Attached& w : workers_) {
    if (w.identity.job() == identity.job() && w.identity.group() == identity.group() &&
        w.identity.rank() == identity.rank()) {
      return absl::AlreadyExistsError(absl::StrCat("job ", identity.job(), " group ",
                                                   identity.group(), " rank ", identity.rank(),
                                                   " is attached already"));
    }
  }
  workers_.push_back({identity, channel});
  stats_.workers = workers_.size();
  v1::AgentMessage event;
  *event.mutable_worker_joined() = identity;
  events_.push_back(std::move(event));
  if (auto it = plans_.find({identity.job(), identity.group()}); it != plans_.end()) {
    v1::WorkerDirective directive;
    *directive.mutable_plan() = it->second;
    channel->Send(directive);
  }
  return absl::OkStatus();
}

void AgentState::RemoveWorker(WorkerChannel* channel) {
  absl::MutexLock lock(&mu_);
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    if (it->channel != channel) continue;
    v1::AgentMessage event;
    *event.mutable_worker_left() = it->identity;
    events_.push_back(std::move(event));
    workers_.erase(it);
    break;
  }
  stats_.workers = workers_.size();
}

std::vector<v1::WorkerIdentity> AgentState::Workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::WorkerIdentity> out;
  for (const Attached& w : workers_) out.push_back(w.identity);
  return out;
}

absl::Status AgentState::EnqueueReport(const v1::WorkerIdentity& from,
                                       const v1::StepReport& report) {
  // Checked against the identity the worker announced, as the coordinator will check it
  // against the group's: the agent re-announces the identity it updates below in every
  // hello, and a coordinator refuses a whole hello over one bad identity, so one worker's
  // bad report would otherwise cut the node off for good.
  absl::Status valid = ValidateReport(report);
  if (valid.ok()) valid = ValidateReportAgainstShape(report, from);
  absl::MutexLock lock(&mu_);
  if (!valid.ok()) {
    ++stats_.reports_rejected;
    return valid;
  }
  // A reshard: keep the identity re-announced to a (restarted) coordinator current.
  for (const v1::BlockTiming& b : report.blocks()) {
    if (b.owner_of_unit_size() == 0) continue;
    for (Attached& w : workers_) {
      if (w.identity.job() != from.job() || w.identity.group() != from.group() ||
          w.identity.rank() != from.rank()) {
        continue;
      }
      for (v1::BlockInfo& info : *w.identity.mutable_blocks()) {
        if (info.block() == b.block()) *info.mutable_owner_of_unit() = b.owner_of_unit();
      }
    }
  }
  if (static_cast<int32_t>(reports_.size()) >= report_capacity_) {
    reports_.pop_front();
    ++dropped_since_batch_;
    ++stats_.reports_dropped;
  }
  v1::WorkerReport& r = reports_.emplace_back();
  r.set_job(from.job());
  r.set_group(from.group());
  r.set_rank(from.rank());
  *r.mutable_step() = report;
  ++stats_.reports_queued;
  return absl::OkStatus();
}

v1::ReportBatch AgentState::TakeReports(int32_t max) {
  absl::MutexLock lock(&mu_);
  v1::ReportBatch batch;
  while (!reports_.empty() && batch.reports_size() < max) {
    *batch.add_reports() = std::move(reports_.front());
    reports_.pop_front();
  }
  batch.set_dropped(dropped_since_batch_);
  dropped_since_batch_ = 0;
  return batch;
}

std::vector<v1::AgentMessage> AgentState::TakeWorkerEvents() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::AgentMessage> out;
  out.swap(events_);
  return out;
}

void AgentState::ClearWorkerEvents() {
  absl::MutexLock lock(&mu_);
  events_.clear();
}

void AgentState::DeliverPlan(const v1::GroupPlan& plan) {
  absl::MutexLock lock(&mu_);
  const GroupKey key{plan.job(), plan.plan().group()};
  plans_[key] = plan.plan();
  v1::WorkerDirective directive;
  *directive.mutable_plan() = plan.plan();
  for (const Attached& w : workers_) {
    if (w.identity.job() == key.first && w.identity.group() == key.second) {
      w.channel->Send(directive);
      ++stats_.plans_relayed;
    }
  }
}

AgentStats AgentState::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ballast::agent
