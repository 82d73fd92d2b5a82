#include "coordinator/policy_proto.h"

#include "common/status_macros.h"

namespace ballast::coordinator {

v1::Policy PolicyToProto(const JobPolicy& p) {
  v1::Policy out;
  out.set_mode(std::string(BalanceModeName(p.mode)));
  out.set_max_pruned_fraction_rank(p.max_pruned_fraction_rank);
  out.set_max_pruned_fraction_group(p.max_pruned_fraction_group);
  out.set_imputation(std::string(ImputationName(p.imputation)));
  out.set_priority(std::string(PriorityName(p.priority)));
  out.set_accuracy_weight_seconds(p.accuracy_weight_seconds);
  out.set_straggler_threshold(p.straggler_threshold);
  out.set_hysteresis(p.hysteresis);
  out.set_reshard_after_ms(absl::ToInt64Milliseconds(p.reshard_after));
  out.set_report_period_ms(absl::ToInt64Milliseconds(p.report_period));
  out.set_expert_capacity_factor(p.expert_capacity_factor);
  return out;
}

absl::StatusOr<JobPolicy> PolicyFromProto(const v1::Policy& in) {
  JobPolicy p;
  BALLAST_ASSIGN_OR_RETURN(p.mode, ParseBalanceMode(in.mode()));
  BALLAST_ASSIGN_OR_RETURN(p.imputation, ParseImputation(in.imputation()));
  BALLAST_ASSIGN_OR_RETURN(p.priority, ParsePriority(in.priority()));
  p.max_pruned_fraction_rank = in.max_pruned_fraction_rank();
  p.max_pruned_fraction_group = in.max_pruned_fraction_group();
  p.accuracy_weight_seconds = in.accuracy_weight_seconds();
  p.straggler_threshold = in.straggler_threshold();
  p.hysteresis = in.hysteresis();
  p.reshard_after = absl::Milliseconds(in.reshard_after_ms());
  p.report_period = absl::Milliseconds(in.report_period_ms());
  p.expert_capacity_factor = in.expert_capacity_factor();
  BALLAST_RETURN_IF_ERROR(ValidatePolicy(p));
  return p;
}

}  // namespace ballast::coordinator
