// The router of a mixture-of-experts block, on the host: top-k selection, gates, the
// load-balancing loss, and the gradient back to the router's logits. Plain functions of
// the logits, so every rank that holds the same logits routes the same way.
//
// Two gate conventions, as Megatron-core's router (moe_router_pre_softmax):
//   post-softmax (default): the k largest logits, gates = softmax over those k (Mixtral);
//   pre-softmax:            softmax over every expert, gates = the k largest probabilities.
// Ties go to the lower expert index.
//
// The auxiliary loss is Switch/GShard load balancing as Megatron writes it:
//   aux = coeff * E / (T^2 k) * sum_e P_e c_e,
// with P_e the sum over tokens of the softmax over every expert, and c_e the tokens routed
// to expert e (not differentiated).
//
// Capacity (MoeRouterOptions::capacity_factor, BlockPlan::capacity_factor): each expert
// keeps the first ExpertCapacity() (ballast/plan.h) of its tokens in token order and drops the rest
// (Megatron's "position" drop policy). A dropped (token, expert) pair contributes nothing
// and has no gradient; the other gates are not renormalised (as Megatron's), so the gate
// of a dropped pair only reaches the router through the softmax it shares with the kept
// ones. The aux loss counts c_e before the drop: it balances what the router chooses,
// which is what the cap would otherwise hide from it.
#ifndef BALLAST_WORKER_LIB_INTERNAL_MOE_ROUTING_H_
#define BALLAST_WORKER_LIB_INTERNAL_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

#include "ballast/plan.h"

namespace ballast::internal {

struct MoeRouterOptions {
  int32_t experts = 0;
  int32_t top_k = 1;
  bool pre_softmax = false;
  float aux_loss_coeff = 0.0f;
  // 0: no cap; otherwise see ballast::ExpertCapacity. Route reads it; RouterBackward does
  // not.
  double capacity_factor = 0.0;
};

struct MoeRouting {
  int32_t tokens = 0;
  // Per token t and choice j < top_k, in descending order: expert[t * k + j], gate[...].
  std::vector<int32_t> expert;
  std::vector<float> gate;
  // Softmax over every expert, tokens x experts (the aux loss's, and pre-softmax gates').
  std::vector<double> probs;
  // Per expert: the tokens it computes, ascending, and their gates: those routed to it,
  // less any over its capacity.
  std::vector<std::vector<int32_t>> expert_tokens;
  std::vector<std::vector<float>> expert_gates;
  // Per expert: the tokens routed to it, before the cap (the router's load, the aux
  // loss's c_e); and the (token, expert) pairs the cap dropped, summed over experts.
  std::vector<int32_t> routed;
  int64_t dropped = 0;
  double aux_loss = 0;
};

// Routes `tokens` rows of `logits` (tokens x options.experts, row-major).
MoeRouting Route(const float* logits, int32_t tokens, const MoeRouterOptions& options);

// dlogits (tokens x experts) = the gradient reaching the logits from `dgate` (tokens x
// experts: dL/d(gate of token t at expert e), read only where e was chosen, and 0 where
// the cap dropped the pair) through the gates, plus aux_scale times the aux loss's
// gradient.
void RouterBackward(const MoeRouting& routing, const MoeRouterOptions& options, const float* dgate,
                    float aux_scale, float* dlogits);

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_MOE_ROUTING_H_
