// Explanations: the planner's inputs, candidates and decision as text for operators
// (`ballastctl explain`).
#include "coordinator/planner/explain.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner/expert_plan.h"

namespace ballast::coordinator {
namespace planner_internal {

// StrCat prints a double as printf's "%.6g" does (checked on 2 million values) without
// parsing a format string: the realistic planner cases took 13% less time a block.
std::string Num(double v) { return absl::StrCat(v); }

std::string DescribePlan(const BlockPlan& plan, int32_t ranks) {
  std::vector<std::string> parts;
  if (!plan.pruned_units.empty()) {
    std::string part = "prune";
    for (size_t r = 0; r < plan.pruned_units.size(); ++r) {
      if (plan.pruned_units[r] > 0) absl::StrAppend(&part, " ", r, ":", plan.pruned_units[r]);
    }
    parts.push_back(std::move(part));
  }
  if (!plan.offloads.empty()) {
    std::string part = "offload";
    for (const Offload& o : plan.offloads) {
      absl::StrAppend(&part, " ", o.owner.value(), "->", o.helper.value(), ":", o.units);
    }
    parts.push_back(std::move(part));
  }
  if (!plan.replicas.empty()) {
    std::string part = "replicate";
    for (const Replica& r : plan.replicas) {
      absl::StrAppend(&part, " ", r.unit, "->", r.helper.value(), ":",
                      absl::StrFormat("%.0f%%", 100 * r.share));
    }
    parts.push_back(std::move(part));
  }
  if (!plan.owner_of_unit.empty()) {
    std::vector<int32_t> counts(ranks, 0);
    for (RankId r : plan.owner_of_unit) {
      if (r.value() >= 0 && r.value() < ranks) ++counts[r.value()];
    }
    parts.push_back(absl::StrCat("reshard to ", absl::StrJoin(counts, ",")));
  }
  return parts.empty() ? "all local" : absl::StrJoin(parts, "; ");
}

}  // namespace planner_internal

using planner_internal::DescribePlan;
using planner_internal::Num;
using planner_internal::RankWork;

namespace {

// The loads' side of a block planned by them (expert_plan.h): the hottest units and where
// the plan sends their tokens.
std::string ExplainLoads(const PlannerInput& input, const BlockDecision& d) {
  const std::vector<double>& work = input.unit_work;
  const double total = std::accumulate(work.begin(), work.end(), 0.0);
  const double mean = work.empty() ? 0 : total / static_cast<double>(work.size());
  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t shown = std::min<size_t>(3, order.size());
  std::partial_sort(order.begin(), order.begin() + shown, order.end(),
                    [&](size_t a, size_t b) { return work[a] > work[b]; });
  std::string out = absl::StrCat("\n  planned by load: ", Num(total), " tokens over ", work.size(),
                                 " units; hottest:");
  for (size_t i = 0; i < shown; ++i) {
    const size_t u = order[i];
    absl::StrAppend(&out, " unit ", u, " on rank ", input.owner_of_unit[u].value(), " ",
                    Num(work[u]),
                    mean > 0 ? absl::StrCat(" (", Num(work[u] / mean), "x mean)") : "");
    std::vector<std::string> went;
    if (!d.plan.owner_of_unit.empty() && d.plan.owner_of_unit[u] != input.owner_of_unit[u]) {
      went.push_back(absl::StrCat("moves to ", d.plan.owner_of_unit[u].value()));
    }
    for (const Replica& r : d.plan.replicas) {
      if (r.unit == static_cast<int32_t>(u)) {
        went.push_back(absl::StrFormat("%.0f%% to %d", 100 * r.share, r.helper.value()));
      }
    }
    if (!went.empty()) absl::StrAppend(&out, " [", absl::StrJoin(went, ", "), "]");
    absl::StrAppend(&out, i + 1 < shown ? "," : "");
  }
  if (!d.plan.owner_of_unit.empty()) {
    std::vector<std::string> moves;
    for (size_t u = 0; u < d.plan.owner_of_unit.size(); ++u) {
      if (d.plan.owner_of_unit[u] == input.owner_of_unit[u]) continue;
      moves.push_back(absl::StrCat("unit ", u, " ", input.owner_of_unit[u].value(), "->",
                                   d.plan.owner_of_unit[u].value()));
    }
    absl::StrAppend(&out, "\n  moves: ", moves.empty() ? "none" : absl::StrJoin(moves, ", "));
  }
  const std::vector<double> before = RankWork(input, BlockPlan{});
  const std::vector<double> after = RankWork(input, d.plan);
  absl::StrAppend(&out, "\n  tokens by rank, all-local -> planned:");
  for (size_t r = 0; r < before.size(); ++r) {
    absl::StrAppend(&out, " ", r, ":", Num(before[r]), "->", Num(after[r]));
  }
  return out;
}

}  // namespace

std::string ExplainDecision(const PlannerInput& input, const JobPolicy& policy,
                            const BlockDecision& d) {
  const bool by_loads = PlansByLoads(input, policy);
  std::string out = absl::StrCat(
      "block ", input.block.value(), " mode ", BalanceModeName(policy.mode), ": ",
      input.ranks.size(), " ranks, ", input.owner_of_unit.size(), " units, transfer ",
      Num(input.transfer_seconds_per_unit), " s/unit, accuracy weight ",
      Num(policy.accuracy_weight_seconds), " s, prune budget ",
      Num(policy.max_pruned_fraction_rank), "/rank ", Num(policy.max_pruned_fraction_group),
      "/group, hysteresis ", Num(policy.hysteresis),
      OffloadsRefused(input) && !by_loads ? ", offloads refused (the coordinator's lines say why)"
                                          : "",
      "\n  [fixed s +] ", by_loads ? "s/token, experts owned:" : "s/unit x units:");
  for (size_t r = 0; r < input.ranks.size(); ++r) {
    const PlannerRank& rank = input.ranks[r];
    absl::StrAppend(&out, " ", r, ":",
                    rank.fixed_seconds > 0 ? absl::StrCat(Num(rank.fixed_seconds), "+") : "",
                    Num(rank.seconds_per_unit), by_loads ? ", " : "x", rank.owned_units,
                    rank.cordoned ? "(cordoned)" : "", rank.chronic ? "(chronic)" : "",
                    !by_loads && !TakesOffloads(input, r) ? "(takes no offloads)" : "");
  }
  if (by_loads) absl::StrAppend(&out, ExplainLoads(input, d));
  absl::StrAppend(&out, "\n  all-local ", Num(d.all_local_step_seconds), " s, ideal ",
                  Num(d.ideal_step_seconds), " s");
  if (d.evens_split) {
    absl::StrAppend(&out,
                    "\n  no rank straggles, but a rank owns more than its share: back to the "
                    "even split");
  } else if (input.calm && !d.calm && !by_loads) {
    absl::StrAppend(&out,
                    "\n  no rank straggles, but a rank is cordoned or owns more than its "
                    "share: balancing");
  }
  absl::StrAppend(&out, "\n  candidates:");
  const int32_t p = static_cast<int32_t>(input.ranks.size());
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const PlanCandidate& c = d.candidates[i];
    absl::StrAppend(&out, "\n    ", CandidateKindName(c.kind), ": ");
    if (!c.feasible) {
      absl::StrAppend(&out, c.note.empty() ? "infeasible" : c.note);
      continue;
    }
    if (c.kind == CandidateKind::kAuto && i > 0 && d.candidates[i - 1].plan == c.plan) {
      absl::StrAppend(&out, "same as ", CandidateKindName(d.candidates[i - 1].kind));
      if (!c.note.empty()) absl::StrAppend(&out, "; ", c.note);
      continue;
    }
    absl::StrAppend(&out, "step ", Num(c.cost.step_seconds), " s, objective ",
                    Num(c.cost.objective), " (", DescribePlan(c.plan, p), ")");
    if (c.kind == CandidateKind::kReshard) {
      absl::StrAppend(&out, ", moves ", c.cost.moved_units, " units once");
    }
    if (!c.note.empty()) absl::StrAppend(&out, "; ", c.note);
  }
  absl::StrAppend(&out, "\n  decision: ");
  if (!Balances(policy.mode)) {
    absl::StrAppend(&out, "mode ", BalanceModeName(policy.mode), " pushes all-local; would push ",
                    CandidateKindName(d.recommended.kind), " (",
                    DescribePlan(d.recommended.plan, p), ") for step ",
                    Num(d.recommended.cost.step_seconds), " s");
  } else if (d.calm && by_loads && input.skew_waits) {
    absl::StrAppend(&out,
                    "all-local: the loads' skew is marginal and has not lasted "
                    "marginal_straggler_for yet, so splitting experts may move weights "
                    "for a spell that ends first");
  } else if (d.calm && by_loads) {
    absl::StrAppend(&out,
                    "all-local: the loads end within the straggler threshold of the ideal, "
                    "so splitting experts would move weights for noise");
  } else if (d.calm) {
    absl::StrAppend(&out,
                    "all-local: no rank straggles, so differences between the estimates "
                    "are noise to balancing");
  } else if (d.kept_for_group) {
    absl::StrAppend(&out, "keep the current plan (", DescribePlan(d.plan, p),
                    "): the best new plan, ", CandidateKindName(d.recommended.kind), " at ",
                    Num(d.recommended.cost.objective), ", beats ", Num(d.objective),
                    " here, but the group's changes together gain too little (the group's note)");
  } else if (d.kept_current) {
    absl::StrAppend(&out, "keep the current plan (", DescribePlan(d.plan, p),
                    "): the best new plan, ", CandidateKindName(d.recommended.kind), " at ",
                    Num(d.recommended.cost.objective), ", is not better than ", Num(d.objective),
                    " by the hysteresis");
  } else {
    absl::StrAppend(&out, CandidateKindName(d.chosen), " (", DescribePlan(d.plan, p), ")");
  }
  absl::StrAppend(&out, "; predicted step ", Num(d.predicted_step_seconds), " s");
  if (d.predicted_step_seconds > 0) {
    absl::StrAppend(&out, " (", Num(d.all_local_step_seconds / d.predicted_step_seconds),
                    "x faster than all-local, ",
                    Num(d.predicted_step_seconds / d.ideal_step_seconds), "x the ideal)");
  }
  return out;
}

}  // namespace ballast::coordinator
