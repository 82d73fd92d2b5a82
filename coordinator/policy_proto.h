// JobPolicy <-> its wire form (ballast.v1.Policy): names for enums, milliseconds for
// durations. PolicyFromProto validates, naming the bad field.
#ifndef BALLAST_COORDINATOR_POLICY_PROTO_H_
#define BALLAST_COORDINATOR_POLICY_PROTO_H_

#include "absl/status/statusor.h"
#include "ballast/v1/admin.pb.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

v1::Policy PolicyToProto(const JobPolicy& policy);
absl::StatusOr<JobPolicy> PolicyFromProto(const v1::Policy& policy);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_POLICY_PROTO_H_
