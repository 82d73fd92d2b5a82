// A double-precision dense mixture-of-experts layer, written from the math (top-k router,
// SwiGLU experts, Switch load-balancing loss), not from worker_lib: one process, every
// expert here, every loop in double. The reference ParallelMoe is checked against.
#ifndef BALLAST_TESTS_TESTING_MOE_REFERENCE_H_
#define BALLAST_TESTS_TESTING_MOE_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "ballast/parallel_moe.h"

namespace ballast::testing {

// The dense parameters in MoeParams' order (w1, w3, w2, router, b2), in double.
struct DenseMoe {
  MoeConfig config;
  std::vector<double> params;
  // A plan's BlockPlan::capacity_factor (0: no cap): each expert keeps the first
  // max(1, ceil(capacity_factor * tokens * top_k / experts)) of its tokens in token order;
  // the others contribute nothing and get no gradient, the gates are not renormalised, and
  // the aux loss counts the tokens routed before the drop.
  double capacity_factor = 0;

  struct Result {
    std::vector<double> y;     // tokens x hidden
    std::vector<double> dx;    // tokens x hidden
    std::vector<double> grad;  // like params
    double aux_loss = 0;
    std::vector<int32_t> tokens_per_expert;  // routed, before the cap
    std::vector<int32_t> kept_per_expert;    // after the cap (pruned experts' included)
    int64_t dropped = 0;                     // (token, expert) pairs over the cap
  };
  // One forward and backward of `tokens` rows; `pruned[e]` experts drop their tokens
  // (contribute nothing, get no gradient). The aux loss's gradient enters scaled by
  // aux_scale.
  Result Run(const std::vector<double>& x, const std::vector<double>& dy, int32_t tokens,
             const std::vector<bool>& pruned, double aux_scale = 1.0) const;
};

// Decoupled AdamW on `params` with per-expert step counts: pruned experts sit the step out
// (weights, moments, counts); the router and b2 always step. `steps` holds one count per
// expert, then one for the replicated parameters.
struct DenseMoeAdamW {
  std::vector<double> m, v;
  std::vector<int64_t> steps;
  void Step(const MoeConfig& config, const AdamWOptions& options, const std::vector<bool>& pruned,
            const std::vector<double>& grad, std::vector<double>& params);
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_MOE_REFERENCE_H_
