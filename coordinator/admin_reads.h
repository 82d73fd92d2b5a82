// AdminReads: what operators read (ballastctl status and explain, /metrics), assembled
// from the coordinator's parts without changing any: the registry's groups, the decision
// loop's last decisions, the straggler judge's runs, the job settings and the speed model.
// Each read copies what it needs from each part under that part's own lock.
//
//   AdminReads reads(link_prior, clock, &registry, &judge, &settings, &loop, speeds);
//   absl::StatusOr<v1::ClusterStatus> status = reads.Status("vit");
#ifndef BALLAST_COORDINATOR_ADMIN_READS_H_
#define BALLAST_COORDINATOR_ADMIN_READS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/v1/admin.pb.h"
#include "common/clock.h"
#include "coordinator/decision_loop.h"
#include "coordinator/group_registry.h"
#include "coordinator/job_settings.h"
#include "coordinator/speed_model.h"
#include "coordinator/straggler_judge.h"

namespace ballast::coordinator {

class AdminReads {
 public:
  // Everything given must outlive the reads. `link_prior`: --link_bytes_per_second.
  AdminReads(double link_prior, Clock* clock, const GroupRegistry* registry,
             const StragglerJudge* judge, const JobSettings* settings, const DecisionLoop* loop,
             SpeedModel* speeds);

  // Every job ('' = all), its groups and ranks. NOT_FOUND for a job with neither groups
  // nor a policy; INVALID_ARGUMENT for a bad name.
  absl::StatusOr<v1::ClusterStatus> Status(const std::string& job) const;
  // The job's policy; the default for a job with groups but none set; NOT_FOUND else.
  absl::StatusOr<JobPolicy> GetPolicy(const std::string& job) const;
  // OK when the job has workers, a policy or a pause; NOT_FOUND naming it otherwise (the
  // admin API refuses to configure unknown jobs unless asked to preconfigure).
  absl::Status CheckJobKnown(const std::string& job) const;
  // The group's plan in force and why its last decision came out as it did.
  absl::StatusOr<v1::Explanation> Explain(const std::string& job, const std::string& group) const;

 private:
  // One group's status, with each rank's state.
  void FillGroup(const GroupSnapshot& group, const JobPolicy& policy, v1::GroupStatus& out) const;

  const double link_prior_;
  Clock* const clock_;
  const GroupRegistry* const registry_;
  const StragglerJudge* const judge_;
  const JobSettings* const settings_;
  const DecisionLoop* const loop_;
  SpeedModel* const speeds_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_ADMIN_READS_H_
