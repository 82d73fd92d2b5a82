// The coordinator's read and admin side: status, explanations, policies, pauses and
// cordons, and the step prediction and link speed that status and explanations show.
// Split from coordinator.cc (the agent side and the decision loop) so that each file
// stays readable on its own.
#include "coordinator/coordinator.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/policy_proto.h"
#include "proto/convert.h"
#include "proto/validate.h"

namespace ballast::coordinator {

void Coordinator::RecentSeconds::Add(double seconds) {
  if (values.size() < kStepWindow) {
    values.push_back(seconds);
  } else {
    values[next] = seconds;
  }
  next = (next + 1) % kStepWindow;
}

double Coordinator::RecentSeconds::Median() const {
  if (values.empty()) return 0;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

double Coordinator::LinkBytesPerSecond(const GroupEntry& group,
                                       std::string* explanation) const {
  const std::optional<LinkModel::Estimate> learned =
      group.links.Slowest(clock_->Monotonic());
  const double prior = options_.link_bytes_per_second;
  if (explanation != nullptr) {
    if (!learned.has_value()) {
      *explanation = absl::StrFormat(
          "link: %.4g MB/s, the --link_bytes_per_second prior (no offload transfer measured "
          "yet)",
          prior / 1e6);
    } else {
      const std::string pair =
          absl::StrFormat("ranks %d and %d", learned->a.value(), learned->b.value());
      const std::string age =
          absl::FormatDuration(absl::Trunc(learned->age, absl::Milliseconds(100)));
      const std::string stale_after = absl::FormatDuration(group.links.stale_after());
      switch (learned->basis) {
        case LinkModel::Basis::kLearned:
          *explanation = absl::StrFormat(
              "link: %.4g MB/s, learned from %d offload transfers between %s (the slowest "
              "pair measured; prior %.4g MB/s)",
              learned->bytes_per_second / 1e6, learned->samples, pair, prior / 1e6);
          break;
        case LinkModel::Basis::kStale:
          *explanation = absl::StrFormat(
              "link: %.4g MB/s, the fastest of %d offload transfers between %s, the newest "
              "%s old (stale after %s: priced at what the link has done until offloads "
              "measure it again; prior %.4g MB/s)",
              learned->bytes_per_second / 1e6, learned->samples, pair, age, stale_after,
              prior / 1e6);
          break;
        case LinkModel::Basis::kRelearning:
          *explanation = absl::StrFormat(
              "link: %.4g MB/s between %s, the fastest transfer seen before it went stale, "
              "until %d new samples are in (%d so far; prior %.4g MB/s)",
              learned->bytes_per_second / 1e6, pair, LinkModel::kMinSamples,
              learned->samples, prior / 1e6);
          break;
      }
    }
  }
  return learned.has_value() ? learned->bytes_per_second : prior;
}

Coordinator::StepPrediction Coordinator::PredictStep(const GroupEntry& group) {
  StepPrediction p;
  if (group.decisions.empty()) return p;  // nothing planned yet: no prediction
  for (const auto& [b, d] : group.decisions) p.blocks += d.predicted_step_seconds;
  if (group.common_fixed_seconds.has_value()) {
    // The rest of every rank's collectives is in the blocks' predictions already.
    p.collectives = *group.common_fixed_seconds;
    return p;
  }
  // The collectives' own cost, without the waiting for a late peer that a plan removes:
  // the rank that arrives last waits least, so the smallest median over the ranks.
  bool any = false;
  for (const auto& [r, rank] : group.ranks) {
    if (!rank.attached || rank.collective_seconds.values.empty()) continue;
    const double median = rank.collective_seconds.Median();
    p.collectives = any ? std::min(p.collectives, median) : median;
    any = true;
  }
  return p;
}

absl::StatusOr<v1::ClusterStatus> Coordinator::Status(const std::string& job) const {
  if (!job.empty()) BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  absl::MutexLock lock(&mu_);
  v1::ClusterStatus out;
  std::map<std::string, v1::JobStatus*> jobs;
  for (const auto& [key, group] : groups_) {
    if (!job.empty() && group.job != job) continue;
    v1::JobStatus*& js = jobs[group.job];
    if (js == nullptr) {
      js = out.add_jobs();
      js->set_job(group.job);
      js->set_paused(Paused(group.job));
      *js->mutable_policy() = PolicyToProto(PolicyFor(group.job));
    }
    v1::GroupStatus* gs = js->add_groups();
    gs->set_group(group.name);
    gs->set_size(group.size);
    gs->set_plan_version(group.plan.version.value());
    gs->set_plan_number(group.plan.number);
    gs->set_plan_summary(PlanSummary(group.plan));
    const StepPrediction prediction = PredictStep(group);
    gs->set_predicted_step_seconds(prediction.blocks + prediction.collectives);
    gs->set_predicted_collective_seconds(prediction.collectives);
    gs->set_link_bytes_per_second(LinkBytesPerSecond(group, nullptr));
    const std::optional<LinkModel::Estimate> link = group.links.Slowest(clock_->Monotonic());
    gs->set_link_learned(link.has_value());
    if (link.has_value()) gs->set_link_basis(LinkBasisName(link->basis));
    int64_t units = 0, pruned = 0, offloaded = 0;
    for (const auto& [b, block] : group.blocks) units += block.num_units;
    for (const BlockPlan& bp : group.plan.blocks) {
      for (int32_t n : bp.pruned_units) pruned += n;
      for (const Offload& o : bp.offloads) offloaded += o.units;
    }
    if (units > 0) {
      gs->set_pruned_fraction(static_cast<double>(pruned) / units);
      gs->set_offloaded_fraction(static_cast<double>(offloaded) / units);
    }
    double measured = 0;
    for (const auto& [r, rank] : group.ranks) {
      if (rank.attached) measured = std::max(measured, rank.step_seconds.Median());
    }
    gs->set_measured_step_seconds(measured);
    const JobPolicy policy = PolicyFor(group.job);
    const absl::Duration now = clock_->Monotonic();
    const int32_t first_block = group.blocks.empty() ? -1 : group.blocks.begin()->first;
    absl::StatusOr<GroupSpeeds> speeds =
        first_block < 0 ? absl::NotFoundError("no blocks")
                        : speeds_->Speeds(group.job, GroupId(group.name), BlockId(first_block),
                                          policy);
    for (const auto& [r, rank] : group.ranks) {
      v1::RankStatus* rs = gs->add_ranks();
      rs->set_rank(r);
      rs->set_device(rank.identity.device());
      rs->set_node(rank.identity.node());
      rs->set_compute_seconds(rank.last_compute_seconds);
      rs->set_collective_seconds(rank.last_collective_seconds);
      std::string state = rank.attached ? "normal" : "detached";
      if (speeds.ok()) {
        for (const RankSpeed& s : speeds->ranks) {
          if (s.rank.value() != r) continue;
          rs->set_seconds_per_unit(s.has_estimate ? s.seconds_per_unit : 0);
          if (rank.attached) state = s.stale ? "stale" : std::string(StragglerStateName(s.state));
        }
      }
      // The pooled verdict the decisions use (coordinator_decide.cc), where the group is
      // planned and the rank was judged in the last few report periods; the speed model's
      // per-block state otherwise (mode off: nothing is pooled).
      if (rank.attached && state != "stale" && policy.mode != BalanceMode::kOff &&
          rank.judged_at.has_value() &&
          now - *rank.judged_at <= kJudgementGapPeriods * policy.report_period) {
        state = !rank.straggling_since.has_value() ? "normal"
                : now - *rank.straggling_since >= policy.reshard_after ? "chronic"
                                                                       : "transient";
      }
      if (cordons_.contains(rank.identity.device())) state = "cordoned";
      rs->set_state(state);
    }
  }
  if (!job.empty() && jobs.empty() && !policies_.contains(job)) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' unknown"));
  }
  int32_t agents = 0;
  for (const auto& [id, a] : agents_) agents += a.sink != nullptr;
  out.set_agents(agents);
  int32_t workers = 0;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) workers += rank.attached;
  }
  out.set_workers(workers);
  out.set_paused(Paused(""));
  for (const auto& [device, reason] : cordons_) out.add_cordoned_devices(device);
  return out;
}

absl::StatusOr<JobPolicy> Coordinator::GetPolicy(const std::string& job) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  absl::MutexLock lock(&mu_);
  auto it = policies_.find(job);
  if (it != policies_.end()) return it->second;
  for (const auto& [key, group] : groups_) {
    if (group.job == job) return JobPolicy{};
  }
  return absl::NotFoundError(absl::StrCat("job '", job, "' unknown (no workers, no policy)"));
}

absl::Status Coordinator::CheckJobKnown(const std::string& job) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  absl::MutexLock lock(&mu_);
  if (policies_.contains(job) || paused_.contains(job)) return absl::OkStatus();
  for (const auto& [key, group] : groups_) {
    if (group.job == job) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(
      "job '", job, "' is not known to the coordinator (no workers, no policy, no pause); "
      "preconfigure it (ballastctl --preconfigure) to set it ahead of the job's start"));
}

absl::Status Coordinator::SetPolicy(const std::string& job, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidatePolicy(policy));
  // Durable first: an operator's setting is never in force without being stored.
  BALLAST_RETURN_IF_ERROR(store_->PutPolicy(job, policy));
  absl::MutexLock lock(&mu_);
  policies_[job] = policy;
  for (auto& [key, group] : groups_) {
    if (group.job == job) group.next_decision = absl::ZeroDuration();  // re-plan now
  }
  BALLAST_LOG(INFO) << "job=" << job << " policy set: mode " << BalanceModeName(policy.mode);
  return absl::OkStatus();
}

absl::Status Coordinator::SetPaused(const std::string& job, bool paused) {
  if (!job.empty()) BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(store_->SetPaused(job, paused));
  absl::MutexLock lock(&mu_);
  paused_[job] = paused;
  BALLAST_LOG(INFO) << (paused ? "paused" : "resumed") << " balancing for "
                    << (job.empty() ? std::string("the cluster") : absl::StrCat("job ", job));
  return absl::OkStatus();
}

absl::Status Coordinator::SetCordon(const std::string& device, bool cordoned,
                                    const std::string& reason) {
  BALLAST_RETURN_IF_ERROR(ValidateName("device", device));
  BALLAST_RETURN_IF_ERROR(ValidateReason("reason", reason));
  if (!cordoned) {
    absl::MutexLock lock(&mu_);
    if (!cordons_.contains(device)) {
      return absl::NotFoundError(absl::StrCat("device '", device, "' is not cordoned"));
    }
  }
  BALLAST_RETURN_IF_ERROR(store_->SetCordon(device, cordoned, reason, clock_->Now()));
  absl::MutexLock lock(&mu_);
  if (cordoned) {
    cordons_[device] = reason;
  } else {
    cordons_.erase(device);
  }
  for (auto& [key, group] : groups_) group.next_decision = absl::ZeroDuration();
  BALLAST_LOG(INFO) << (cordoned ? "cordoned" : "uncordoned") << " device " << device
                    << (reason.empty() ? "" : ": ") << reason;
  return absl::OkStatus();
}

absl::StatusOr<v1::Explanation> Coordinator::Explain(const std::string& job,
                                                     const std::string& group) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidateName("group", group));
  absl::MutexLock lock(&mu_);
  auto it = groups_.find({job, group});
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' group '", group, "' unknown"));
  }
  v1::Explanation out;
  out.set_job(job);
  out.set_group(group);
  out.set_plan_version(it->second.plan.version.value());
  out.set_plan_number(it->second.plan.number);
  *out.mutable_plan() = ToProto(it->second.plan);
  const GroupEntry::Reasons& reasons = it->second.reasons;
  std::vector<std::string> lines = reasons.before;
  for (std::string& line : ExplainGroup(reasons.planned, reasons.decision, it->second.decisions)) {
    lines.push_back(std::move(line));
  }
  lines.insert(lines.end(), reasons.after.begin(), reasons.after.end());
  const std::string text = absl::StrJoin(lines, "\n");
  out.set_text(text.empty() ? "no decision yet" : text);
  return out;
}

CoordinatorCounters Coordinator::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

int32_t Coordinator::connected_agents() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& [id, a] : agents_) n += a.sink != nullptr;
  return n;
}

int32_t Coordinator::attached_workers() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) n += rank.attached;
  }
  return n;
}

}  // namespace ballast::coordinator
