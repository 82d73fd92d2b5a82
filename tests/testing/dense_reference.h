// A double-precision dense reference for the plan-aware TP blocks, and a driver that runs a
// real block on ranks (threads or processes) and checks every step of it against that
// reference.
//
// The reference is written from the block math (design brief section 2), not from the
// implementation: one process, no sharding, every loop in double. A block is modelled as a
// replicated bias plus a sum of unit contributions, so the expectation for any plan is the
// same sum with each unit treated by its fate: local and offloaded units are computed
// exactly, pruned units contribute their imputation and receive no gradient, and AdamW
// leaves pruned units (weights, moments and step counts) alone.
//
//   DenseBlock mlp = DenseBlock::Mlp(/*hidden=*/16, /*intermediate=*/128, /*unit_size=*/8);
//   std::vector<float> params = RandomNormal(mlp.dense_size(), /*seed=*/1, 0.2);
//   DenseResult want = mlp.Run(ToDouble(params), ToDouble(x), ToDouble(dy), batch, seq);
//   EXPECT_LE(MaxRelError(got_y, want.y), 1e-5);
//
// The driver (RunScript + ExpectRunMatchesReference) runs a script of steps, each with
// inputs and optionally a plan offered just before it, on N ranks, records what every rank
// saw (fates, outputs, gathered gradients and state), and then replays the same steps on a
// ReferenceTrainer using the fates the ranks reported, after checking that those fates
// agree with the plan in force.
#ifndef BALLAST_TESTS_TESTING_DENSE_REFERENCE_H_
#define BALLAST_TESTS_TESTING_DENSE_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/block.h"
#include "ballast/compute.h"
#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/plan.h"
#include "ballast/types.h"
#include "testing/rank_threads.h"

namespace ballast::testing {

// ---------------------------------------------------------------------------------------
// Numbers.

// n samples of N(0, stddev^2), reproducible from `seed` (std::mt19937). Parameters use
// stddev 0.2 and inputs 1.0, which keeps pre-activations, scores and outputs O(1) at the
// small sizes the tests use.
std::vector<float> RandomNormal(size_t n, uint32_t seed, double stddev);

std::vector<double> ToDouble(const std::vector<float>& v);

// max_i |got[i] - want[i]| / max(max_i |want[i]|, 1e-12); +infinity when the sizes differ
// or `got` holds a NaN, so a malformed result can never pass a tolerance.
double MaxRelError(const std::vector<float>& got, const std::vector<double>& want);

// The elements of `v` at the positions where `keep` is true.
template <typename T>
std::vector<T> Select(const std::vector<T>& v, const std::vector<bool>& keep) {
  std::vector<T> out;
  for (size_t i = 0; i < v.size() && i < keep.size(); ++i) {
    if (keep[i]) out.push_back(v[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The dense blocks.

// How each unit takes part in one step.
struct UnitTreatment {
  // Per unit (or empty: none): the unit is not computed and receives no gradient.
  std::vector<bool> pruned;
  // Per unit (or empty): the mean activation a pruned unit is imputed with (Imputation::
  // kMean). An empty entry imputes nothing (Imputation::kZero).
  std::vector<std::vector<double>> imputed_mean;
};

// One forward + backward of a dense block. Shapes follow the block API: tokens = batch*seq.
struct DenseResult {
  std::vector<double> y;     // tokens x hidden
  std::vector<double> dx;    // tokens x hidden
  std::vector<double> grad;  // the Concat() layout of the block's parameters
  // Per unit: the mean over all tokens of the unit's activation (MLP: its gelu outputs,
  // unit_size values; attention: its context vector, head_dim values). Empty for units that
  // were not computed.
  std::vector<std::vector<double>> batch_mean;
};

// A dense MLP (y = gelu(x W1 + b1) W2 + b2, units = tiles of unit_size neurons) or dense
// ViT self-attention (units = heads), over parameters in the Concat() layout of MlpParams /
// AttentionParams.
class DenseBlock {
 public:
  static DenseBlock Mlp(int32_t hidden, int32_t intermediate, int32_t unit_size);
  static DenseBlock Attention(int32_t hidden, int32_t num_heads, int32_t head_dim);

  bool is_mlp() const { return kind_ == Kind::kMlp; }
  int32_t hidden() const { return hidden_; }
  int32_t num_units() const { return num_units_; }
  // Values per unit of the running mean activation: unit_size or head_dim.
  int32_t unit_width() const { return unit_width_; }
  size_t dense_size() const;
  // For each element of the Concat() layout, the unit it belongs to; -1 for the
  // replicated output bias (b2 / bo), which every step updates.
  std::vector<int32_t> UnitOfElement() const;
  // True at the elements of the units marked in `units` (size num_units()).
  std::vector<bool> ElementsOfUnits(const std::vector<bool>& units) const;

  // Forward and backward of the whole block with every unit treated as `treatment` says.
  DenseResult Run(const std::vector<double>& params, const std::vector<double>& x,
                  const std::vector<double>& dy, int32_t batch, int32_t seq,
                  const UnitTreatment& treatment = {}) const;
  // What unit `unit` adds to y when computed (tokens x hidden, without the bias).
  std::vector<double> UnitContribution(const std::vector<double>& params,
                                       const std::vector<double>& x, int32_t batch, int32_t seq,
                                       int32_t unit) const;
  // What a pruned unit adds to every token row under kMean: mean (unit_width values)
  // times the unit's output weights (W2 rows / Wo rows of its head); hidden values.
  std::vector<double> ImputedRow(const std::vector<double>& params, int32_t unit,
                                 const std::vector<double>& mean) const;

  // The documented dense layouts, sliced independently of MlpParams::Split and
  // AttentionParams::Split so that tests do not trust the code under test for them.
  MlpParams ToMlpParams(const std::vector<float>& dense) const;
  AttentionParams ToAttentionParams(const std::vector<float>& dense) const;

 private:
  enum class Kind { kMlp, kAttention };
  DenseBlock(Kind kind, int32_t hidden, int32_t num_units, int32_t unit_width);

  // Adds unit `unit`'s contribution to y (if non-null); when dy is non-null also its
  // parameter gradients into grad and its input gradient into dx. Writes its batch-mean
  // activation into *mean if non-null.
  void UnitPass(const std::vector<double>& params, const std::vector<double>& x,
                const std::vector<double>* dy, int32_t batch, int32_t seq, int32_t unit,
                std::vector<double>* y, std::vector<double>* dx, std::vector<double>* grad,
                std::vector<double>* mean) const;
  void MlpUnitPass(const std::vector<double>& params, const std::vector<double>& x,
                   const std::vector<double>* dy, int32_t tokens, int32_t unit,
                   std::vector<double>* y, std::vector<double>* dx, std::vector<double>* grad,
                   std::vector<double>* mean) const;
  void AttentionUnitPass(const std::vector<double>& params, const std::vector<double>& x,
                         const std::vector<double>* dy, int32_t batch, int32_t seq, int32_t unit,
                         std::vector<double>* y, std::vector<double>* dx, std::vector<double>* grad,
                         std::vector<double>* mean) const;
  // Offset of the replicated bias and of the output weights in the dense layout.
  size_t BiasOffset() const;
  size_t OutputWeightOffset() const;

  Kind kind_;
  int32_t hidden_;
  int32_t num_units_;
  int32_t unit_width_;
};

// Decoupled AdamW over a dense parameter vector with a step count per element, so that
// units that sat out steps (pruned) are bias-corrected with their own count.
struct DenseAdamWState {
  std::vector<double> w, m, v;
  std::vector<int64_t> steps;
};
DenseAdamWState StartAdamW(std::vector<double> w);
// Updates every element whose `frozen` entry is false (frozen may be empty: none):
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; t += 1;
// w -= lr (wd w + (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)).
void DenseAdamWStep(const AdamWOptions& options, const std::vector<double>& grad,
                    const std::vector<bool>& frozen, DenseAdamWState* state);

// A dense block trained step by step the way a plan-aware block should be: forward and
// backward with per-unit fates, the running mean activations kMean imputes from, and
// AdamW that skips pruned units.
class ReferenceTrainer {
 public:
  ReferenceTrainer(DenseBlock block, std::vector<double> params, const AdamWOptions& adamw,
                   double mean_decay);

  // One training step in which unit u has fate fates[u] (empty: all local). Local units
  // update their running mean (the first time: set to the batch mean; later: decay * mean
  // + (1 - decay) * batch mean); offloaded and pruned units keep theirs. Returns the
  // step's forward / backward result, computed before the AdamW update.
  DenseResult Step(const std::vector<double>& x, const std::vector<double>& dy, int32_t batch,
                   int32_t seq, const std::vector<UnitFate>& fates, Imputation imputation);

  const DenseBlock& block() const { return block_; }
  const DenseAdamWState& state() const { return state_; }
  // Empty until the unit has been computed by its owner.
  const std::vector<double>& unit_mean(int32_t unit) const { return means_[unit]; }

 private:
  DenseBlock block_;
  AdamWOptions adamw_;
  double mean_decay_;
  DenseAdamWState state_;
  std::vector<std::vector<double>> means_;
};

// ---------------------------------------------------------------------------------------
// Driving a real block on ranks (threads, or processes).

struct ScriptStep {
  // Runs on every rank before this step's plan is offered, e.g. to offer plans that must
  // be rejected. Thread-safe gtest EXPECTs only (ASSERT would return from the hook only).
  std::function<void(RankContext&, ParallelBlock&)> before_step;
  // Offered by every rank just before this step's BeginStep, so it applies in this step.
  std::optional<WorkloadPlan> plan;
  // This step's shape, when it differs from the script's (0: the script's).
  int32_t batch = 0;
  int32_t seq = 0;
  std::vector<float> x;   // tokens x hidden, the same on every rank
  std::vector<float> dy;  // tokens x hidden
};

struct Script {
  int32_t ranks = 1;
  BlockId block;                      // the block under test (plans address it by id)
  std::vector<RankId> owner_of_unit;  // its ownership when created
  int32_t batch = 2;
  int32_t seq = 5;
  AdamWOptions adamw;
  float mean_decay = 0.9f;  // must match the block's UnitConfig
  std::vector<ScriptStep> steps;
  std::string backend = "cpu";  // RunRanksOptions::backend
  // Ranks as forked processes (rank_processes.h) instead of threads: the layout of CUDA with
  // several ranks (one process per GPU). No step may then have a before_step hook.
  bool processes = false;
};

// `count` steps of random inputs for `block` (x ~ N(0, 1), dy ~ N(0, 1)), no plans.
std::vector<ScriptStep> RandomSteps(const DenseBlock& block, int32_t batch, int32_t seq, int count,
                                    uint32_t seed);

struct StateSnapshot {
  std::vector<float> value, adam_m, adam_v;  // GatherDense of each field
};

// What one rank saw in one step.
struct RankStep {
  PlanVersion applied_version;        // after BeginStep
  std::vector<RankId> owner_of_unit;  // after BeginStep
  std::vector<int32_t> units;         // LocalUnits() after BeginStep
  std::vector<UnitFate> fates;        // LocalFates() after BeginStep
  std::vector<float> y, dx;
  std::vector<float> grad;  // GatherDense(kGrad) between Backward and AdamWStep
  StateSnapshot after;      // after EndStep
  // UnitMean() of every local unit after EndStep, for the units where it returned OK.
  std::map<int32_t, std::vector<float>> unit_means;
};

struct RunRecord {
  std::vector<StateSnapshot> initial;        // [rank], as the factory returned the block
  std::vector<std::vector<RankStep>> steps;  // [step][rank]
};

// Creates the block on one rank (and LoadDense's the test's parameters into it).
using BlockFactory = std::function<absl::StatusOr<std::unique_ptr<ParallelBlock>>(RankContext&)>;

// Runs `script` on script.ranks ranks (threads, or processes when script.processes): per
// step before_step, OfferPlan (if a plan), BeginStep, Forward, Backward, GatherDense(kGrad),
// AdamWStep, EndStep, GatherDense (kValue / kAdamM / kAdamV), UnitMean. Returns the first
// rank's error, annotated with the step and the call.
absl::StatusOr<RunRecord> RunScript(const Script& script, const BlockFactory& make_block);

// Replays `script` on a ReferenceTrainer started from `initial_params` and EXPECTs, for
// every step and rank: the applied plan version and ownership; LocalUnits partitioning the
// units by owner; per-rank pruned / offloaded counts equal to the plan's; y, dx, gradients
// (zero for pruned units), weights and AdamW moments within `tolerance` (MaxRelError) of
// the reference; pruned units' weights and moments bitwise unchanged; and the running
// means UnitMean reports.
void ExpectRunMatchesReference(const DenseBlock& block, const std::vector<float>& initial_params,
                               const Script& script, const RunRecord& record,
                               double tolerance = 1e-5);

// The plan in force at `step` of `script`: the newest plan offered at or before it.
const WorkloadPlan* PlanInForce(const Script& script, size_t step);
// The shape of `step` of `script`.
int32_t StepBatch(const Script& script, size_t step);
int32_t StepSeq(const Script& script, size_t step);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_DENSE_REFERENCE_H_
