#include "ballast/plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/text.h"

namespace ballast {

absl::string_view ImputationName(Imputation imputation) {
  switch (imputation) {
    case Imputation::kZero:
      return "zero";
    case Imputation::kMean:
      return "mean";
  }
  return "unknown";
}

absl::StatusOr<Imputation> ParseImputation(absl::string_view name) {
  if (name == "zero") return Imputation::kZero;
  if (name == "mean") return Imputation::kMean;
  return absl::InvalidArgumentError(
      absl::StrCat("imputation ", Excerpt(name), " unknown; expected zero or mean"));
}

absl::string_view PriorityName(Priority priority) {
  switch (priority) {
    case Priority::kChange:
      return "change";
    case Priority::kMagnitude:
      return "magnitude";
    case Priority::kRandom:
      return "random";
    case Priority::kRoundRobin:
      return "round-robin";
  }
  return "unknown";
}

absl::StatusOr<Priority> ParsePriority(absl::string_view name) {
  if (name == "change") return Priority::kChange;
  if (name == "magnitude") return Priority::kMagnitude;
  if (name == "random") return Priority::kRandom;
  if (name == "round-robin") return Priority::kRoundRobin;
  return absl::InvalidArgumentError(absl::StrCat(
      "priority ", Excerpt(name), " unknown; expected change, magnitude, random or round-robin"));
}

namespace {

absl::Status BlockError(const BlockPlan& block, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("block ", block.block.value(), ": ", what));
}

}  // namespace

namespace {
// BlockPlan::replicas against the ownership the plan leaves (`owners`) and what each rank
// prunes or offloads by count (`removed`).
absl::Status ValidateReplicas(const BlockPlan& bp, const BlockShape& shape,
                              const std::vector<RankId>& owners,
                              const std::vector<int64_t>& removed, int32_t size) {
  if (bp.replicas.empty()) return absl::OkStatus();
  if (!shape.units_divide) {
    return BlockError(bp,
                      "replicas need a block whose units' work divides (a mixture of "
                      "experts); this block's units are computed whole");
  }
  std::map<int32_t, double> shares;
  std::set<std::pair<int32_t, int32_t>> pairs;
  for (size_t i = 0; i < bp.replicas.size(); ++i) {
    const Replica& r = bp.replicas[i];
    const std::string field = absl::StrCat("replicas[", i, "]");
    if (r.unit < 0 || r.unit >= shape.num_units) {
      return BlockError(
          bp, absl::StrCat(field, ".unit ", r.unit, " out of range [0, ", shape.num_units, ")"));
    }
    if (r.helper.value() < 0 || r.helper.value() >= size) {
      return BlockError(
          bp, absl::StrCat(field, ".helper ", r.helper.value(), " out of range [0, ", size, ")"));
    }
    const int32_t owner = owners[r.unit].value();
    if (r.helper.value() == owner) {
      return BlockError(
          bp, absl::StrCat(field, ".helper equals the owner ", owner, " of unit ", r.unit));
    }
    if (!(r.share > 0.0 && r.share <= 1.0)) {
      return BlockError(bp, absl::StrCat(field, ".share ", r.share, " out of range (0, 1]"));
    }
    if (!pairs.insert({r.unit, r.helper.value()}).second) {
      return BlockError(
          bp, absl::StrCat(field, " repeats unit ", r.unit, " on helper ", r.helper.value()));
    }
    // A little slack: shares computed as fractions that sum to 1 may round above it.
    if ((shares[r.unit] += r.share) > 1.0 + 1e-9) {
      return BlockError(bp, absl::StrCat(field, ": unit ", r.unit, "'s shares sum to ",
                                         shares[r.unit], ", over 1"));
    }
    if (removed[owner] > 0) {
      return BlockError(bp, absl::StrCat(field, ": unit ", r.unit, "'s owner ", owner,
                                         " also prunes or offloads units by count in this "
                                         "block, which could take this unit too"));
    }
  }
  return absl::OkStatus();
}
}  // namespace

int64_t ExpertCapacity(double capacity_factor, int64_t tokens, int32_t top_k, int32_t experts) {
  if (capacity_factor <= 0.0) return tokens;
  // In double and in this order, as the references compute it (tests/testing/
  // moe_reference.cc, tests/python/torch_moe_test.py), so a cap on an exact integer
  // rounds alike everywhere.
  const double cap = std::ceil(capacity_factor * static_cast<double>(tokens) * top_k / experts);
  return cap >= static_cast<double>(tokens) ? tokens
                                            : std::max<int64_t>(1, static_cast<int64_t>(cap));
}

absl::Status ValidateBlockPlan(const BlockPlan& bp, const BlockShape& shape, int32_t size) {
  auto in_range = [size](RankId r) { return r.value() >= 0 && r.value() < size; };
  const std::string range = absl::StrCat("out of range [0, ", size, ")");

  // Ownership the counts refer to: the plan's own when it reshards, else the current one.
  const std::vector<RankId>* owners = &shape.owner_of_unit;
  if (!bp.owner_of_unit.empty()) {
    if (static_cast<int32_t>(bp.owner_of_unit.size()) != shape.num_units) {
      return BlockError(bp, absl::StrCat("owner_of_unit has ", bp.owner_of_unit.size(),
                                         " entries, block has ", shape.num_units, " units"));
    }
    for (size_t u = 0; u < bp.owner_of_unit.size(); ++u) {
      if (!in_range(bp.owner_of_unit[u])) {
        return BlockError(
            bp, absl::StrCat("owner_of_unit[", u, "] = ", bp.owner_of_unit[u].value(), " ", range));
      }
    }
    owners = &bp.owner_of_unit;
  }
  std::vector<int32_t> owned(size, 0);
  for (RankId r : *owners) ++owned[r.value()];

  std::vector<int64_t> removed(size, 0);  // pruned + offloaded, per owner
  if (!bp.pruned_units.empty()) {
    if (static_cast<int32_t>(bp.pruned_units.size()) != size) {
      return BlockError(bp, absl::StrCat("pruned_units has ", bp.pruned_units.size(),
                                         " entries, group has ", size, " ranks"));
    }
    for (int32_t r = 0; r < size; ++r) {
      const int32_t n = bp.pruned_units[r];
      if (n < 0 || n > owned[r]) {
        return BlockError(bp, absl::StrCat("pruned_units[", r, "] = ", n, " out of range [0, ",
                                           owned[r], "] (units rank ", r, " owns)"));
      }
      removed[r] += n;
    }
  }
  std::set<std::pair<int32_t, int32_t>> pairs;
  for (size_t i = 0; i < bp.offloads.size(); ++i) {
    const Offload& o = bp.offloads[i];
    const std::string field = absl::StrCat("offloads[", i, "]");
    if (!in_range(o.owner)) {
      return BlockError(bp, absl::StrCat(field, ".owner ", o.owner.value(), " ", range));
    }
    if (!in_range(o.helper)) {
      return BlockError(bp, absl::StrCat(field, ".helper ", o.helper.value(), " ", range));
    }
    if (o.owner == o.helper) {
      return BlockError(bp, absl::StrCat(field, ".helper equals its owner ", o.owner.value()));
    }
    if (o.units <= 0) {
      return BlockError(bp, absl::StrCat(field, ".units ", o.units, " must be > 0"));
    }
    if (!pairs.insert({o.owner.value(), o.helper.value()}).second) {
      return BlockError(bp, absl::StrCat(field, " repeats owner ", o.owner.value(), " -> helper ",
                                         o.helper.value()));
    }
    removed[o.owner.value()] += o.units;
  }
  for (int32_t r = 0; r < size; ++r) {
    if (removed[r] > owned[r]) {
      return BlockError(bp, absl::StrCat("rank ", r, " prunes and offloads ", removed[r],
                                         " units but owns ", owned[r]));
    }
  }
  // Written to refuse NaN as well as negatives.
  if (!(bp.capacity_factor >= 0.0) || !std::isfinite(bp.capacity_factor)) {
    return BlockError(bp, absl::StrCat("capacity_factor ", bp.capacity_factor,
                                       " must be finite and >= 0 (0: no cap)"));
  }
  if (bp.capacity_factor > 0.0 && !shape.units_divide) {
    return BlockError(bp, absl::StrCat("capacity_factor ", bp.capacity_factor,
                                       " needs a block whose units' work divides (a mixture of "
                                       "experts); this block's units are computed whole"));
  }
  return ValidateReplicas(bp, shape, *owners, removed, size);
}

absl::Status ValidatePlan(const WorkloadPlan& plan, const GroupShape& shape) {
  if (plan.group != shape.group) {
    return absl::InvalidArgumentError(absl::StrCat("plan v", plan.version.value(), ": group '",
                                                   plan.group.value(), "' is not this group '",
                                                   shape.group.value(), "'"));
  }
  if (plan.version.value() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan version ", plan.version.value(), " must be > 0"));
  }
  if (plan.number < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan v", plan.version.value(), ": number ", plan.number, " must be >= 0"));
  }
  if (plan.imputation != Imputation::kZero && plan.imputation != Imputation::kMean) {
    return absl::InvalidArgumentError(absl::StrCat("plan v", plan.version.value(), ": imputation ",
                                                   static_cast<int>(plan.imputation), " unknown"));
  }
  if (plan.priority.has_value() && PriorityName(*plan.priority) == "unknown") {
    return absl::InvalidArgumentError(absl::StrCat("plan v", plan.version.value(), ": priority ",
                                                   static_cast<int>(*plan.priority), " unknown"));
  }
  std::set<int32_t> seen;
  for (const BlockPlan& bp : plan.blocks) {
    const BlockShape* block_shape = nullptr;
    for (const BlockShape& s : shape.blocks) {
      if (s.block == bp.block) block_shape = &s;
    }
    absl::Status s;
    if (block_shape == nullptr) {
      s = BlockError(bp, "block unknown to this group");
    } else if (!seen.insert(bp.block.value()).second) {
      s = BlockError(bp, "block listed twice");
    } else {
      s = ValidateBlockPlan(bp, *block_shape, shape.size);
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan v", plan.version.value(), " ", s.message()));
    }
  }
  return absl::OkStatus();
}

bool MoveMade(const BlockPlan& block, const std::vector<RankId>& workers_run) {
  return !block.owner_of_unit.empty() && block.owner_of_unit == workers_run;
}

std::string PlanSummary(const WorkloadPlan& plan, const std::set<BlockId>& moves_made) {
  std::string out =
      plan.number > 0 ? absl::StrCat("#", plan.number) : absl::StrCat("v", plan.version.value());
  if (plan.blocks.empty()) return absl::StrCat(out, ": all local");
  absl::StrAppend(&out, " (", ImputationName(plan.imputation),
                  plan.priority.has_value() ? absl::StrCat(", ", PriorityName(*plan.priority)) : "",
                  "):");
  for (const BlockPlan& bp : plan.blocks) {
    absl::StrAppend(&out, " block ", bp.block.value());
    if (!bp.pruned_units.empty()) {
      absl::StrAppend(&out, " pruned {", absl::StrJoin(bp.pruned_units, ","), "}");
    }
    for (const Offload& o : bp.offloads) {
      absl::StrAppend(&out, " offload ", o.owner.value(), "->", o.helper.value(), " x", o.units);
    }
    for (const Replica& r : bp.replicas) {
      absl::StrAppend(&out, " replica ", r.unit, "->", r.helper.value(), " x", r.share);
    }
    if (bp.capacity_factor > 0.0) absl::StrAppend(&out, " capacity x", bp.capacity_factor);
    if (!bp.owner_of_unit.empty()) {
      absl::StrAppend(&out, moves_made.contains(bp.block) ? " reshard (made)" : " reshard");
    }
    absl::StrAppend(&out, ";");
  }
  return out;
}

}  // namespace ballast
