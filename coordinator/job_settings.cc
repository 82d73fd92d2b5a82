#include "coordinator/job_settings.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ballast::coordinator {

absl::StatusOr<std::unique_ptr<JobSettings>> JobSettings::Load(PolicyStore* store, Clock* clock) {
  std::unique_ptr<JobSettings> s(new JobSettings(store, clock));
  BALLAST_ASSIGN_OR_RETURN(auto policies, store->ListPolicies());
  BALLAST_ASSIGN_OR_RETURN(auto paused, store->ListPaused());
  BALLAST_ASSIGN_OR_RETURN(auto cordons, store->ListCordons());
  BALLAST_ASSIGN_OR_RETURN(auto holds, store->ListHolds());
  absl::MutexLock lock(&s->mu_);
  for (const StoredHold& h : holds) s->holds_[{h.job, h.group}] = h.hold;
  for (auto& [job, policy] : policies) s->policies_[job] = policy;
  for (const std::string& scope : paused) s->paused_[scope] = true;
  for (const Cordon& c : cordons) s->cordons_[c.device] = c.reason;
  BALLAST_LOG(INFO) << "coordinator loaded " << s->policies_.size() << " policies, "
                    << paused.size() << " paused scopes, " << s->cordons_.size() << " cordons, "
                    << s->holds_.size() << " held groups";
  return s;
}

JobPolicy JobSettings::PolicyFor(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  auto it = policies_.find(job);
  return it == policies_.end() ? JobPolicy{} : it->second;
}

bool JobSettings::HasPolicy(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  return policies_.contains(job);
}

bool JobSettings::Paused(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  auto cluster = paused_.find("");
  auto own = paused_.find(job);
  return (cluster != paused_.end() && cluster->second) || (own != paused_.end() && own->second);
}

bool JobSettings::HasPauseSetting(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  return paused_.contains(job);
}

bool JobSettings::Cordoned(const std::string& device) const {
  absl::MutexLock lock(&mu_);
  return cordons_.contains(device);
}

std::vector<std::string> JobSettings::CordonedDevices() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [device, reason] : cordons_) out.push_back(device);
  return out;
}

absl::Status JobSettings::SetPolicy(const std::string& job, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidatePolicy(policy));
  BALLAST_RETURN_IF_ERROR(store_->PutPolicy(job, policy));
  absl::MutexLock lock(&mu_);
  policies_[job] = policy;
  BALLAST_LOG(INFO) << "job=" << job << " policy set: mode " << BalanceModeName(policy.mode);
  return absl::OkStatus();
}

absl::Status JobSettings::SetPaused(const std::string& job, bool paused) {
  BALLAST_RETURN_IF_ERROR(store_->SetPaused(job, paused));
  absl::MutexLock lock(&mu_);
  paused_[job] = paused;
  BALLAST_LOG(INFO) << (paused ? "paused" : "resumed") << " balancing for "
                    << (job.empty() ? std::string("the cluster") : absl::StrCat("job ", job));
  return absl::OkStatus();
}

absl::Status JobSettings::SetCordon(const std::string& device, bool cordoned,
                                    const std::string& reason) {
  if (!cordoned && !Cordoned(device)) {
    return absl::NotFoundError(absl::StrCat("device '", device, "' is not cordoned"));
  }
  BALLAST_RETURN_IF_ERROR(store_->SetCordon(device, cordoned, reason, clock_->Now()));
  absl::MutexLock lock(&mu_);
  if (cordoned) {
    cordons_[device] = reason;
  } else {
    cordons_.erase(device);
  }
  BALLAST_LOG(INFO) << (cordoned ? "cordoned" : "uncordoned") << " device " << device
                    << (reason.empty() ? "" : ": ") << reason;
  return absl::OkStatus();
}

std::optional<GroupHold> JobSettings::HoldFor(const std::string& job,
                                              const std::string& group) const {
  absl::MutexLock lock(&mu_);
  auto it = holds_.find({job, group});
  if (it == holds_.end()) return std::nullopt;
  return it->second;
}

absl::Status JobSettings::SetHold(const std::string& job, const std::string& group,
                                  const std::optional<GroupHold>& hold) {
  if (!hold.has_value() && !HoldFor(job, group).has_value()) {
    return absl::NotFoundError(
        absl::StrCat("job ", job, " group ", group, " is not held: nothing to release"));
  }
  BALLAST_RETURN_IF_ERROR(store_->SetHold(job, group, hold));
  absl::MutexLock lock(&mu_);
  if (!hold.has_value()) {
    holds_.erase({job, group});
    BALLAST_LOG(INFO) << "job=" << job << " group=" << group << " released";
    return absl::OkStatus();
  }
  holds_[{job, group}] = *hold;
  BALLAST_LOG(INFO) << "job=" << job << " group=" << group << " held: " << DescribeHold(*hold);
  return absl::OkStatus();
}

}  // namespace ballast::coordinator
