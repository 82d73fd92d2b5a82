// Validation of wire messages at the edge, shared by the agent and the coordinator.
// Every error is INVALID_ARGUMENT and names the field.
#ifndef BALLAST_PROTO_VALIDATE_H_
#define BALLAST_PROTO_VALIDATE_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
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
// Values of one block's token loads in one report (BlockTiming.unit_tokens: forwards x
// units): 64 experts over 16,384 micro-batches; bounded so one report cannot hold megabytes.
inline constexpr int kMaxUnitTokenValues = 1 << 20;
// Token rows one rank computes in a step (BlockTiming.tokens_computed): beyond any step,
// and what the speed model takes as a block's work.
inline constexpr int64_t kMaxTokensComputed = int64_t{1} << 40;
// The longest any one timing in a step report may be (a block's compute or collectives, a
// transfer sample): an hour, beyond any training step, so that one report cannot weigh
// more than the rest of a window.
inline constexpr double kMaxStepSeconds = 3600;

// What one worker identity may announce. Every announced unit is held by the agent and
// the coordinator for as long as the group is known (4 bytes each, per block), so the
// shape is bounded as the number of workers is: a hostile hello of 4 blocks of 3M units
// held 118 MB of the coordinator's heap. The coordinator sets them from its flags
// (--max_units_per_block, --max_blocks_per_worker); the defaults are far above any
// model's blocks (a unit is an attention head or an MLP column slice).
struct ShapeLimits {
  int32_t max_units_per_block = 1 << 20;
  int32_t max_blocks_per_worker = 64;
};

// INVALID_ARGUMENT naming `field`, the limit and an excerpt of the offending value.
absl::Status ValidateName(absl::string_view field, absl::string_view name);
absl::Status ValidateReason(absl::string_view field, absl::string_view reason);

// The fields every worker identity needs (job, group and device names, node when set,
// rank within group_size, consistent block ownership), and its shape within `limits`
// (the error names the limit).
absl::Status ValidateIdentity(const v1::WorkerIdentity& identity, const ShapeLimits& limits = {});
// A step report's numbers: finite, non-negative, bounded.
absl::Status ValidateReport(const v1::StepReport& report);

// A step report against what its reporter's group announced: the one check of a report's
// place and shape, made by the agent (against the worker's identity) and by the
// coordinator (against the group's registered blocks); what it passes, the layers behind
// them trust. In order:
//   - every transfer sample comes from a peer: a rank in [0, group_size) other than `rank`
//     (INVALID_ARGUMENT);
//   - ownership (after a reshard) is for an announced block, one owner per unit, every
//     owner in the group (INVALID_ARGUMENT naming owner_of_unit);
//   - every block timed was announced (NOT_FOUND "unknown block").
// `units_of_block` gives an announced block's units, nullopt for a block not announced.
// Numbers are ValidateReport's: call it first.
absl::Status ValidateReportAgainstShape(
    const v1::StepReport& report, int32_t rank, int32_t group_size,
    absl::FunctionRef<std::optional<int32_t>(int32_t block)> units_of_block);
// The same against one worker's identity (the agent's view of its reporter).
absl::Status ValidateReportAgainstShape(const v1::StepReport& report,
                                        const v1::WorkerIdentity& reporter);

}  // namespace ballast

#endif  // BALLAST_PROTO_VALIDATE_H_
