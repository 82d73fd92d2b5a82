// Balancing a mixture-of-experts block by replicas (BlockPlan::replicas): slices of hot
// experts' tokens computed by ranks with time to spare, so that every rank's expert work
// ends together. Pure: loads in, replicas out.
//
// Routing load is dynamic but predictable from step to step (Pro-Prophet, in the design
// brief's references): the caller predicts each expert's work for the next step (the last
// step's tokens, say) and prices a replica's transfer (its weights there, its gradients
// back); the balancer moves work greedily from the rank that ends last to the one that
// ends first, splitting the loaded rank's largest expert, while the move shortens the
// step by more than it costs. When a skew persists, BalanceOwnership moves experts'
// ownership instead (a reshard: paid once, where a replica pays every step).
//
//   ExpertLoads loads{.work = {tokens per expert...}, .owner_of_unit = owners,
//                     .speed = {1, 1}, .replica_cost = 0.002};
//   std::vector<Replica> replicas = BalanceExperts(loads);
#ifndef BALLAST_COORDINATOR_PLANNER_EXPERT_BALANCE_H_
#define BALLAST_COORDINATOR_PLANNER_EXPERT_BALANCE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "ballast/types.h"

namespace ballast::coordinator {

struct ExpertLoads {
  // Per unit (expert): the work its tokens make, in seconds at speed 1.
  std::vector<double> work;
  std::vector<RankId> owner_of_unit;
  // Per rank: relative speed; a rank's time is its work over its speed.
  std::vector<double> speed;
  // Seconds one replica adds to both its owner and its helper (the transfers).
  double replica_cost = 0;
  // Stop once the slowest rank ends within this fraction of the balanced time: changes
  // inside the noise are not made.
  double tolerance = 0.02;
  // At most this many replicas (each costs a transfer and a small GEMM's efficiency).
  int max_replicas = 16;
};

// The replicas that balance `loads` (empty when balanced within tolerance, or when no
// move pays). INVALID_ARGUMENT naming the field for mismatched sizes, a negative or
// non-finite work or cost, a speed not > 0, or an owner out of range.
absl::StatusOr<std::vector<Replica>> BalanceExperts(const ExpertLoads& loads);

// The ownership that balances `loads` by whole experts, from `loads.owner_of_unit` by the
// fewest moves a local search finds: while the rank that ends last ends past the balanced
// time by more than the tolerance, the single move of one of its experts to another rank,
// or swap with one of another rank's, that most shortens the later of the two ranks'
// times, if by more than the tolerance of the balanced time. Every expert moved is sent once with
// its optimizer state, so the search starts from where the experts are rather than packing afresh
// (a fresh packing of 8 experts moves about half of them to balance what one or two moves balance
// as well). Replicas and replica_cost play no part. At most as many moves as there are experts
// (each is E x E / ranks tries), then it stops where it is. Errors as BalanceExperts'.
absl::StatusOr<std::vector<RankId>> BalanceOwnership(const ExpertLoads& loads);

// Each rank's predicted time under `replicas` (work over speed, plus replica_cost per
// replica it sends or computes). The same arithmetic BalanceExperts plans with.
std::vector<double> RankTimes(const ExpertLoads& loads, const std::vector<Replica>& replicas);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_EXPERT_BALANCE_H_
