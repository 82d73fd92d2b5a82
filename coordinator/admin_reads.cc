#include "coordinator/admin_reads.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/group_figures.h"
#include "coordinator/policy_proto.h"
#include "proto/convert.h"
#include "proto/validate.h"

namespace ballast::coordinator {

AdminReads::AdminReads(double link_prior, Clock* clock, const GroupRegistry* registry,
                       const StragglerJudge* judge, const JobSettings* settings,
                       const DecisionLoop* loop, SpeedModel* speeds)
    : link_prior_(link_prior),
      clock_(clock),
      registry_(registry),
      judge_(judge),
      settings_(settings),
      loop_(loop),
      speeds_(speeds) {}

void AdminReads::FillGroup(const GroupSnapshot& group, const JobPolicy& policy,
                           v1::GroupStatus& gs) const {
  gs.set_group(group.name);
  gs.set_size(group.size);
  gs.set_plan_version(group.plan.version.value());
  gs.set_plan_number(group.plan.number);
  gs.set_plan_summary(PlanSummary(group.plan, MovesMade(group)));
  const StepPrediction prediction = loop_->Prediction(group);
  gs.set_predicted_step_seconds(prediction.Step());
  gs.set_predicted_collective_seconds(prediction.collectives);
  gs.set_link_bytes_per_second(
      LinkBytesPerSecond(group.link, group.link_stale_after, link_prior_, nullptr));
  gs.set_link_learned(group.link.has_value());
  if (group.link.has_value()) gs.set_link_basis(LinkBasisName(group.link->basis));
  if (const std::optional<GroupHold> hold = settings_->HoldFor(group.job, group.name)) {
    v1::Hold& h = *gs.mutable_hold();
    h.set_rank(hold->rank);
    h.set_offload_fraction(hold->offload_fraction);
    h.set_reshard_fraction(hold->reshard_fraction);
  }
  int64_t units = 0, pruned = 0, offloaded = 0;
  for (const BlockSnapshot& block : group.blocks) units += block.num_units;
  for (const BlockPlan& bp : group.plan.blocks) {
    for (int32_t n : bp.pruned_units) pruned += n;
    for (const Offload& o : bp.offloads) offloaded += o.units;
  }
  if (units > 0) {
    gs.set_pruned_fraction(static_cast<double>(pruned) / units);
    gs.set_offloaded_fraction(static_cast<double>(offloaded) / units);
  }
  double measured = 0;
  for (const RankSnapshot& rank : group.ranks) {
    if (rank.attached) measured = std::max(measured, rank.step_median);
  }
  gs.set_measured_step_seconds(measured);
  const absl::Duration now = clock_->Monotonic();
  const int32_t first_block = group.blocks.empty() ? -1 : group.blocks.front().block;
  absl::StatusOr<GroupSpeeds> speeds =
      first_block < 0
          ? absl::NotFoundError("no blocks")
          : speeds_->Speeds(group.job, GroupId(group.name), BlockId(first_block), policy);
  const std::map<int32_t, StragglerJudge::RankRun> runs = judge_->Ranks(group.ref);
  for (const RankSnapshot& rank : group.ranks) {
    v1::RankStatus* rs = gs.add_ranks();
    rs->set_rank(rank.rank);
    rs->set_device(rank.device);
    rs->set_node(rank.node);
    rs->set_compute_seconds(rank.last_compute_seconds);
    rs->set_collective_seconds(rank.last_collective_seconds);
    std::string state = rank.attached ? "normal" : "detached";
    if (speeds.ok()) {
      for (const RankSpeed& s : speeds->ranks) {
        if (s.rank.value() != rank.rank) continue;
        rs->set_seconds_per_unit(s.has_estimate ? s.seconds_per_unit : 0);
        if (rank.attached) state = s.stale ? "stale" : std::string(StragglerStateName(s.state));
      }
    }
    // The pooled verdict the decisions use (straggler_judge.h), where the group is planned
    // and the rank was judged in the last few report periods (normal in a calm spell its
    // run survives, as the decisions see it then); the speed model's per-block state
    // otherwise (mode off: nothing is pooled).
    auto run = runs.find(rank.rank);
    if (rank.attached && state != "stale" && policy.mode != BalanceMode::kOff &&
        run != runs.end() && run->second.judged_at.has_value() &&
        now - *run->second.judged_at <=
            StragglerJudge::kJudgementGapPeriods * policy.report_period) {
      const std::optional<absl::Duration>& since = run->second.straggling_since;
      // Chronic as the decisions see it: lasted reshard_after, or its kind measured.
      const bool chronic =
          since.has_value() && (now - *since >= policy.reshard_after || run->second.kind_measured);
      state = !since.has_value() || run->second.InCalmSpell() ? "normal"
              : chronic                                       ? "chronic"
                                                              : "transient";
    }
    if (settings_->Cordoned(rank.device)) state = "cordoned";
    rs->set_state(state);
  }
}

absl::StatusOr<v1::ClusterStatus> AdminReads::Status(const std::string& job) const {
  if (!job.empty()) BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  v1::ClusterStatus out;
  std::map<std::string, v1::JobStatus*> jobs;
  int32_t workers = 0;
  for (const GroupSnapshot& group : registry_->Snapshots("")) {
    for (const RankSnapshot& rank : group.ranks) workers += rank.attached;
    if (!job.empty() && group.job != job) continue;
    const JobPolicy policy = settings_->PolicyFor(group.job);
    v1::JobStatus*& js = jobs[group.job];
    if (js == nullptr) {
      js = out.add_jobs();
      js->set_job(group.job);
      js->set_paused(settings_->Paused(group.job));
      *js->mutable_policy() = PolicyToProto(policy);
    }
    FillGroup(group, policy, *js->add_groups());
  }
  if (!job.empty() && jobs.empty() && !settings_->HasPolicy(job)) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' unknown"));
  }
  out.set_agents(registry_->connected_agents());
  out.set_workers(workers);
  out.set_paused(settings_->Paused(""));
  for (const std::string& device : settings_->CordonedDevices()) out.add_cordoned_devices(device);
  return out;
}

absl::StatusOr<JobPolicy> AdminReads::GetPolicy(const std::string& job) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  if (settings_->HasPolicy(job) || registry_->HasJob(job)) return settings_->PolicyFor(job);
  return absl::NotFoundError(absl::StrCat("job '", job, "' unknown (no workers, no policy)"));
}

absl::Status AdminReads::CheckJobKnown(const std::string& job) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  if (settings_->HasPolicy(job) || settings_->HasPauseSetting(job) || registry_->HasJob(job)) {
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(
      "job '", job,
      "' is not known to the coordinator (no workers, no policy, no pause); "
      "preconfigure it (ballastctl --preconfigure) to set it ahead of the job's start"));
}

absl::StatusOr<v1::Explanation> AdminReads::Explain(const std::string& job,
                                                    const std::string& group) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidateName("group", group));
  const std::optional<GroupSnapshot> snapshot = registry_->Snapshot({job, group}, false);
  if (!snapshot.has_value()) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' group '", group, "' unknown"));
  }
  const DecisionRecord record = loop_->Record(snapshot->ref);
  v1::Explanation out;
  out.set_job(job);
  out.set_group(group);
  out.set_plan_version(snapshot->plan.version.value());
  out.set_plan_number(snapshot->plan.number);
  *out.mutable_plan() = ToProto(snapshot->plan);
  const DecisionRecord::Reasons& reasons = record.reasons;
  std::vector<std::string> lines = reasons.before;
  for (std::string& line : ExplainGroup(reasons.planned, reasons.decision, record.decisions)) {
    lines.push_back(std::move(line));
  }
  lines.insert(lines.end(), reasons.after.begin(), reasons.after.end());
  const std::string text = absl::StrJoin(lines, "\n");
  out.set_text(text.empty() ? "no decision yet" : text);
  return out;
}

}  // namespace ballast::coordinator
