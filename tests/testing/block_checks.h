// Checks shared by the MLP and attention block tests (the blocks share ParallelBlock's
// machinery, so the same properties must hold for both).
#ifndef BALLAST_TESTS_TESTING_BLOCK_CHECKS_H_
#define BALLAST_TESTS_TESTING_BLOCK_CHECKS_H_

#include <string>
#include <utility>
#include <vector>

#include "ballast/plan.h"
#include "testing/dense_reference.h"
#include "testing/rank_threads.h"

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

// One step's activations in backend memory, each batch x seq x hidden: x and dy the
// block's first step's, the rest zero.
struct StepBuffers {
  Buffer x, y, z, dy, dz, dx;
};
absl::StatusOr<StepBuffers> MakeStepBuffers(Compute& compute, const CheckedBlock& checked);

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

// On 2 ranks owning the first and the second half of the block's `units` units (as
// `factory` makes it): UnitMean refuses unit -1, unit `units` and the other rank's units.
void ExpectUnitMeanRejectsUnitsNotOwnedHere(const BlockFactory& factory, int units);

// A plan OfferPlan must refuse, and a word its error must name (empty: any error will do).
struct BadPlan {
  std::string what;
  std::string field;
  WorkloadPlan plan;
};

// On one rank (e.g. in a ScriptStep::before_step hook): OfferPlan refuses every plan of
// `bad`, naming its field. Thread-safe EXPECTs only.
void ExpectOfferPlanRejects(RankContext& ctx, const std::vector<BadPlan>& bad);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_BLOCK_CHECKS_H_
