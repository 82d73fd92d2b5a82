// Checks shared by the MLP and attention block tests (the blocks share ParallelBlock's
// machinery, so the same properties must hold for both).
#ifndef BALLAST_TESTS_TESTING_BLOCK_CHECKS_H_
#define BALLAST_TESTS_TESTING_BLOCK_CHECKS_H_

#include <utility>
#include <vector>

#include "ballast/plan.h"
#include "testing/dense_reference.h"

namespace ballast::testing {

// The block under test and what it must compute: its factory, its dense reference with
// its parameters, one step's input and output gradient, and the shape.
struct CheckedBlock {
  BlockFactory factory;
  const DenseBlock* dense = nullptr;
  std::vector<float> params;
  const ScriptStep* step = nullptr;
  AdamWOptions adamw;
  int32_t batch = 0;
  int32_t seq = 0;
  int32_t hidden = 0;
};

// On 2 ranks: non-positive batch or seq is INVALID_ARGUMENT; each `overflowing` shape is
// refused; null buffers are refused; Backward before (or after only rejected) Forwards is
// refused. Then the block is unharmed: a good step equals the dense reference.
void ExpectRejectsBadShapesAndKeepsWorking(
    const CheckedBlock& checked, const std::vector<std::pair<int32_t, int32_t>>& overflowing);

// On 2 ranks, `checked` and a second block made by `other` share a group; `plan` names only
// the other block. The other block prunes `pruned_per_rank` units as the plan says, and
// the checked block stays exactly plain TP. Run as in a layer: checked then other forward,
// other then checked backward.
void ExpectBlockOutsideThePlanStaysExact(const CheckedBlock& checked, const BlockFactory& other,
                                         const WorkloadPlan& plan,
                                         const std::vector<int>& pruned_per_rank);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_BLOCK_CHECKS_H_
