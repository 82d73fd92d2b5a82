// Validation of wire messages at the edge, shared by the agent and the coordinator.
// Every error is INVALID_ARGUMENT and names the field.
#ifndef BALLAST_PROTO_VALIDATE_H_
#define BALLAST_PROTO_VALIDATE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ballast/v1/common.pb.h"

namespace ballast {

// Names from the outside (jobs, groups, devices, nodes, agent ids) become map keys, store
// rows, log fields and Prometheus label values. They are 1 to kMaxNameBytes bytes of
// ASCII letters, digits and . _ - : / @ + (host names, Kubernetes names, "node-3/gpu1",
// "cuda:0"); no spaces or control bytes, so a label or a log line cannot be forged.
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr absl::string_view kNameCharacters = "letters, digits and . _ - : / @ +";
// Free text from operators (a cordon's reason): at most kMaxReasonBytes, no control bytes
// (UTF-8 is fine).
inline constexpr size_t kMaxReasonBytes = 1024;
// A link sample (BlockTiming.received): at most 1 TiB (beyond any block's offloads in a
// step), at a rate between 1 kB/s and 10 TB/s (beyond any link; outside it a sample could
// price every offload out, or make them free).
inline constexpr int64_t kMaxTransferSampleBytes = int64_t{1} << 40;
inline constexpr double kMinTransferBytesPerSecond = 1e3;
inline constexpr double kMaxTransferBytesPerSecond = 1e13;
// Micro-batches in one step (BlockTiming.micro_batches): beyond any training loop, and
// small enough that the offload price it multiplies stays finite.
inline constexpr int32_t kMaxMicroBatches = 1 << 16;

// INVALID_ARGUMENT naming `field`, the limit and an excerpt of the offending value.
absl::Status ValidateName(absl::string_view field, absl::string_view name);
absl::Status ValidateReason(absl::string_view field, absl::string_view reason);

// The fields every worker identity needs (job, group and device names, node when set,
// rank within group_size, consistent block ownership).
absl::Status ValidateIdentity(const v1::WorkerIdentity& identity);
// A step report's numbers: finite, non-negative, bounded.
absl::Status ValidateReport(const v1::StepReport& report);
// What needs the reporter's place in its group: every transfer sample comes from a peer,
// a rank in [0, group_size) other than `rank`. The agent and the coordinator each know it.
absl::Status ValidateReportPeers(const v1::StepReport& report, int32_t rank,
                                 int32_t group_size);

}  // namespace ballast

#endif  // BALLAST_PROTO_VALIDATE_H_
