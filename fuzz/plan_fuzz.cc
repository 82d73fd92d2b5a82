// A plan as a worker receives it (ballast.v1.WorkloadPlan, relayed by its agent): decoded
// with FromProto and checked with ValidatePlan against a fixed small model, as
// worker_lib/client/agent_client.cc and TpGroup::OfferPlan do before a plan may be agreed
// on. What ValidatePlan accepts is checked again here, property by property, since a
// worker applies an accepted plan by indexing its units with these counts.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ballast/plan.h"
#include "fuzz/fuzz_common.h"
#include "proto/convert.h"

namespace ballast::fuzz {
namespace {

constexpr int32_t kRanks = 4;

std::vector<RankId> Owners(const std::vector<int32_t>& owners) {
  std::vector<RankId> out;
  for (int32_t r : owners) out.push_back(RankId(r));
  return out;
}

// Four ranks; an evenly split block, an uneven one (after a reshard) and one where two
// ranks own nothing, so the fuzzer meets the edges of "units a rank owns".
GroupShape Model() {
  GroupShape shape;
  shape.group = GroupId("vit/tp0");
  shape.size = kRanks;
  shape.blocks.push_back(
      {BlockId(0), 16, Owners({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3})});
  shape.blocks.push_back({BlockId(1), 8, Owners({0, 0, 0, 0, 0, 1, 2, 3})});
  shape.blocks.push_back({BlockId(7), 3, Owners({1, 1, 2})});
  return shape;
}

// The properties of an accepted plan, restated independently of plan.cc.
void CheckAccepted(const WorkloadPlan& plan, const GroupShape& shape) {
  FUZZ_CHECK(plan.version.value() > 0, "accepted a plan without a version");
  std::set<int32_t> blocks;
  for (const BlockPlan& bp : plan.blocks) {
    FUZZ_CHECK(blocks.insert(bp.block.value()).second, "accepted a block twice");
    const BlockShape* block = nullptr;
    for (const BlockShape& b : shape.blocks) {
      if (b.block == bp.block) block = &b;
    }
    FUZZ_CHECK(block != nullptr, "accepted an unknown block");
    const std::vector<RankId>& owners =
        bp.owner_of_unit.empty() ? block->owner_of_unit : bp.owner_of_unit;
    FUZZ_CHECK(static_cast<int32_t>(owners.size()) == block->num_units, "ownership size");
    std::vector<int64_t> owned(shape.size, 0), removed(shape.size, 0);
    for (RankId r : owners) {
      FUZZ_CHECK(r.value() >= 0 && r.value() < shape.size, "accepted an owner out of range");
      ++owned[r.value()];
    }
    FUZZ_CHECK(
        bp.pruned_units.empty() || static_cast<int32_t>(bp.pruned_units.size()) == shape.size,
        "pruned_units size");
    for (size_t r = 0; r < bp.pruned_units.size(); ++r) {
      FUZZ_CHECK(bp.pruned_units[r] >= 0, "negative prune count");
      removed[r] += bp.pruned_units[r];
    }
    std::set<std::pair<int32_t, int32_t>> pairs;
    for (const Offload& o : bp.offloads) {
      FUZZ_CHECK(o.owner.value() >= 0 && o.owner.value() < shape.size, "offload owner");
      FUZZ_CHECK(o.helper.value() >= 0 && o.helper.value() < shape.size, "offload helper");
      FUZZ_CHECK(o.owner != o.helper && o.units > 0, "offload to itself or of nothing");
      FUZZ_CHECK(pairs.insert({o.owner.value(), o.helper.value()}).second, "offload twice");
      removed[o.owner.value()] += o.units;
    }
    for (int32_t r = 0; r < shape.size; ++r) {
      FUZZ_CHECK(removed[r] <= owned[r], absl::StrCat("rank ", r, " gives away more than it owns"));
    }
  }
}

}  // namespace
}  // namespace ballast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ballast;
  using namespace ballast::fuzz;
  QuietLogs();
  v1::WorkloadPlan wire;
  if (!wire.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<WorkloadPlan> plan = FromProto(wire);
  if (!plan.ok()) return 0;
  // What a worker re-encodes must decode to the same plan (the agent replays plans).
  absl::StatusOr<WorkloadPlan> again = FromProto(ToProto(*plan));
  FUZZ_CHECK(again.ok() && *again == *plan, "plan does not survive ToProto/FromProto");
  (void)PlanSummary(*plan);
  static const GroupShape model = Model();
  // Against the model as is, and as if the plan named this group, so that inputs with any
  // group name reach the block checks.
  for (bool same_group : {false, true}) {
    GroupShape shape = model;
    if (same_group) shape.group = plan->group;
    absl::Status valid = ValidatePlan(*plan, shape);
    FUZZ_CHECK(
        valid.code() == absl::StatusCode::kOk || valid.code() == absl::StatusCode::kInvalidArgument,
        valid.ToString());
    if (valid.ok()) CheckAccepted(*plan, shape);
  }
  return 0;
}
