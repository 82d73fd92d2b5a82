// Conversions between the wire messages (ballast/v1/*.proto) and the plan library's
// types. Every conversion from the wire validates what the types cannot express
// (e.g. an unknown imputation) and returns an error naming the field.
#ifndef BALLAST_PROTO_CONVERT_H_
#define BALLAST_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "ballast/step_timings.h"
#include "ballast/v1/common.pb.h"

namespace ballast {

v1::WorkloadPlan ToProto(const WorkloadPlan& plan);
absl::StatusOr<WorkloadPlan> FromProto(const v1::WorkloadPlan& plan);

v1::StepReport ToProto(const StepTimings& timings);

}  // namespace ballast

#endif  // BALLAST_PROTO_CONVERT_H_
