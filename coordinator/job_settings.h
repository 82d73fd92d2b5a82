// JobSettings: what operators set (policies per job, pauses per job or for the cluster,
// cordoned devices, groups held at a fixed plan), kept in the durable store and cached
// here. Configuration, not state: forgetting an idle group leaves its job's settings (and
// its hold) alone.
//
//   BALLAST_ASSIGN_OR_RETURN(auto settings, JobSettings::Load(store, clock));
//   if (!settings->Paused(job)) plan with settings->PolicyFor(job) ...
//
// Thread-safe. A setting is written to the store before it takes effect, so none is ever
// in force without being stored.
#ifndef BALLAST_COORDINATOR_JOB_SETTINGS_H_
#define BALLAST_COORDINATOR_JOB_SETTINGS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "coordinator/policy.h"
#include "coordinator/policy_store.h"

namespace ballast::coordinator {

class JobSettings {
 public:
  // `store` and `clock` must outlive the settings. Loads everything from the store.
  static absl::StatusOr<std::unique_ptr<JobSettings>> Load(PolicyStore* store, Clock* clock);

  // The job's policy, or the default one.
  JobPolicy PolicyFor(const std::string& job) const;
  bool HasPolicy(const std::string& job) const;
  // Whether balancing is paused for the job, or for the whole cluster ('').
  bool Paused(const std::string& job) const;
  // Whether a pause was ever set for exactly this scope (a job is known by it).
  bool HasPauseSetting(const std::string& job) const;
  bool Cordoned(const std::string& device) const;
  std::vector<std::string> CordonedDevices() const;  // sorted
  // The hold on the job's group, if an operator set one.
  std::optional<GroupHold> HoldFor(const std::string& job, const std::string& group) const;

  // Names are validated by the caller; the policy here.
  absl::Status SetPolicy(const std::string& job, const JobPolicy& policy);
  absl::Status SetPaused(const std::string& job, bool paused);
  // Uncordoning a device that is not cordoned is NOT_FOUND.
  absl::Status SetCordon(const std::string& device, bool cordoned, const std::string& reason);
  // Holds the group at `hold` (validated by the caller against the group's size), or
  // releases it (nullopt): NOT_FOUND when it is not held. Stored first.
  absl::Status SetHold(const std::string& job, const std::string& group,
                       const std::optional<GroupHold>& hold);

 private:
  JobSettings(PolicyStore* store, Clock* clock) : store_(store), clock_(clock) {}

  PolicyStore* const store_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, JobPolicy> policies_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> paused_ ABSL_GUARDED_BY(mu_);          // "" = cluster
  std::map<std::string, std::string> cordons_ ABSL_GUARDED_BY(mu_);  // device -> reason
  std::map<std::pair<std::string, std::string>, GroupHold> holds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_JOB_SETTINGS_H_
