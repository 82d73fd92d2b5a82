#include "proto/convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ballast {

v1::WorkloadPlan ToProto(const WorkloadPlan& plan) {
  v1::WorkloadPlan out;
  out.set_group(plan.group.value());
  out.set_version(plan.version.value());
  out.set_number(plan.number);
  out.set_imputation(plan.imputation == Imputation::kMean ? v1::IMPUTATION_MEAN
                                                          : v1::IMPUTATION_ZERO);
  if (plan.priority.has_value()) {
    switch (*plan.priority) {
      case Priority::kChange:
        out.set_priority(v1::PRIORITY_CHANGE);
        break;
      case Priority::kMagnitude:
        out.set_priority(v1::PRIORITY_MAGNITUDE);
        break;
      case Priority::kRandom:
        out.set_priority(v1::PRIORITY_RANDOM);
        break;
      case Priority::kRoundRobin:
        out.set_priority(v1::PRIORITY_ROUND_ROBIN);
        break;
    }
  }
  for (const BlockPlan& b : plan.blocks) {
    v1::BlockPlan* pb = out.add_blocks();
    pb->set_block(b.block.value());
    for (int32_t n : b.pruned_units) pb->add_pruned_units(n);
    for (const Offload& o : b.offloads) {
      v1::Offload* po = pb->add_offloads();
      po->set_owner(o.owner.value());
      po->set_helper(o.helper.value());
      po->set_units(o.units);
    }
    for (RankId r : b.owner_of_unit) pb->add_owner_of_unit(r.value());
    for (const Replica& r : b.replicas) {
      v1::Replica* pr = pb->add_replicas();
      pr->set_unit(r.unit);
      pr->set_helper(r.helper.value());
      pr->set_share(r.share);
    }
    pb->set_capacity_factor(b.capacity_factor);
  }
  return out;
}

absl::StatusOr<WorkloadPlan> FromProto(const v1::WorkloadPlan& in) {
  WorkloadPlan plan;
  plan.group = GroupId(in.group());
  plan.version = PlanVersion(in.version());
  plan.number = in.number();
  switch (in.imputation()) {
    case v1::IMPUTATION_ZERO:
      plan.imputation = Imputation::kZero;
      break;
    case v1::IMPUTATION_MEAN:
      plan.imputation = Imputation::kMean;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("plan v", in.version(), ": imputation ", in.imputation(), " unknown"));
  }
  switch (in.priority()) {
    case v1::PRIORITY_UNSPECIFIED:
      break;
    case v1::PRIORITY_CHANGE:
      plan.priority = Priority::kChange;
      break;
    case v1::PRIORITY_MAGNITUDE:
      plan.priority = Priority::kMagnitude;
      break;
    case v1::PRIORITY_RANDOM:
      plan.priority = Priority::kRandom;
      break;
    case v1::PRIORITY_ROUND_ROBIN:
      plan.priority = Priority::kRoundRobin;
      break;
    default:
      // A policy this worker does not know (a newer coordinator's). Which of its units a
      // prune count takes is each rank's own choice and any choice is a valid plan, so the
      // blocks keep their own policy rather than the whole plan being refused.
      break;
  }
  for (const v1::BlockPlan& pb : in.blocks()) {
    BlockPlan& b = plan.blocks.emplace_back();
    b.block = BlockId(pb.block());
    b.pruned_units.assign(pb.pruned_units().begin(), pb.pruned_units().end());
    for (const v1::Offload& o : pb.offloads()) {
      b.offloads.push_back({RankId(o.owner()), RankId(o.helper()), o.units()});
    }
    for (int32_t r : pb.owner_of_unit()) b.owner_of_unit.push_back(RankId(r));
    // A NaN is unequal to itself: a plan holding one would never match its own
    // re-encoding (agents replay plans, workers compare them), so it is refused here, by
    // name, before the validator would refuse it anyway.
    for (const v1::Replica& r : pb.replicas()) {
      if (std::isnan(r.share())) {
        return absl::InvalidArgumentError(absl::StrCat("plan v", in.version(), " block ",
                                                       pb.block(), ": a replica's share is nan"));
      }
      b.replicas.push_back({r.unit(), RankId(r.helper()), r.share()});
    }
    if (std::isnan(pb.capacity_factor())) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan v", in.version(), " block ", pb.block(), ": capacity_factor is nan"));
    }
    b.capacity_factor = pb.capacity_factor();
  }
  return plan;
}

v1::StepReport ToProto(const StepTimings& timings) {
  v1::StepReport out;
  out.set_step(timings.step);
  out.set_plan_version(timings.plan_version.value());
  out.set_plan_number(timings.plan_number);
  out.set_agreement_seconds(timings.agreement_seconds);
  for (const BlockTiming& b : timings.blocks) {
    v1::BlockTiming* pb = out.add_blocks();
    pb->set_block(b.block.value());
    pb->set_compute_seconds(b.compute_seconds);
    pb->set_comm_seconds(b.comm_seconds);
    pb->set_units_computed(b.units_computed);
    pb->set_micro_batches(b.micro_batches);
    pb->mutable_unit_tokens()->Assign(b.unit_tokens.begin(), b.unit_tokens.end());
    pb->set_tokens_computed(b.tokens_computed);
    if (b.received_from >= 0) {
      v1::TransferSample* received = pb->mutable_received();
      received->set_from_rank(b.received_from);
      received->set_bytes(b.received_bytes);
      received->set_seconds(b.received_seconds);
    }
  }
  return out;
}

}  // namespace ballast
