// Validation of wire messages at the edge, shared by the agent and the coordinator.
// Every error is INVALID_ARGUMENT and names the field.
#ifndef BALLAST_PROTO_VALIDATE_H_
#define BALLAST_PROTO_VALIDATE_H_

#include "absl/status/status.h"
#include "ballast/v1/common.pb.h"

namespace ballast {

// The fields every worker identity needs (job, group, device, rank within group_size,
// consistent block ownership).
absl::Status ValidateIdentity(const v1::WorkerIdentity& identity);
// A step report's numbers: finite, non-negative, bounded.
absl::Status ValidateReport(const v1::StepReport& report);

}  // namespace ballast

#endif  // BALLAST_PROTO_VALIDATE_H_
