// ParallelBlock: the machinery every plan-aware TP block shares.
//
// A block's output is a sum of unit contributions plus a replicated bias. Each rank owns
// some units and stores their parameters (and AdamW moments, running means, ...) one
// contiguous slab per unit, in *storage order*: units sorted by priority, highest first.
// A step's plan then splits that order into three contiguous ranges,
//
//   [ local (computed here) | offloaded to helpers, one range per helper | pruned ]
//
// so the local GEMMs run over one contiguous range whose size is the kept fraction.
// Helpers receive the offloaded slabs, compute them as an extra range, and add the result
// into their own partial sum before the block's one all-reduce; in backward they return
// the slabs' weight gradients. Storage order changes only when the priority window rolls
// (or units reshard), never per step.
//
// Subclasses (ParallelMlp, ParallelAttention) supply the math over a range of units; this
// class supplies ranges, transfers, imputation, resharding, AdamW and timing.
//
// Micro-batches: a step may run any number of Forward/Backward pairs before its AdamWStep
// (gradient accumulation, as Megatron and torchtitan train). The plan is fixed for the
// whole step; weights go to helpers once per step; the first Backward of a step writes the
// gradients and later ones add to them. Each Backward differentiates the latest Forward.
// With UnitConfig::keep_gradients (torch's contract, what ballast.torch uses) gradients
// instead outlive AdamWStep and step boundaries, adding up until DiscardGradients.
// With UnitConfig::recompute, a block keeps no activations between Forward and Backward:
// Backward runs the block's local math forward again (no collective) from the saved input,
// and the activation buffers are one set shared by every recomputing block of the group.
//
// Thread-compatibility: all methods are called from the training thread.
#ifndef BALLAST_BLOCK_H_
#define BALLAST_BLOCK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ballast/compute.h"
#include "ballast/ownership.h"
#include "ballast/plan.h"
#include "ballast/step_timings.h"
#include "ballast/types.h"

namespace ballast {

class TpGroup;
class IntervalTimer;
struct PeerTransfer;

// The fate of one of this rank's units in the step in progress.
enum class UnitFate { kLocal, kOffloaded, kPruned };
// "local", "offloaded" or "pruned".
absl::string_view UnitFateName(UnitFate fate);

// Which part of the block's state a dense gather returns.
enum class ParamField { kValue, kGrad, kAdamM, kAdamV };

// What resuming a block's training needs: dense parameters and AdamW moments (in the
// subclass's GatherDense layout) and every unit's AdamW step count, indexed by unit id.
// It does not depend on ownership, so it restores onto any ownership (after a reshard,
// or with a different number of ranks of the same model). Running mean activations and
// priority scores are statistics, not state: they restart after a restore.
struct BlockCheckpoint {
  std::vector<float> value;
  std::vector<float> adam_m;
  std::vector<float> adam_v;
  std::vector<int64_t> unit_steps;
  int64_t bias_step = 0;
};

struct UnitConfig {
  // Priority policy and window (in steps) after which scores are recomputed and storage
  // reordered. The window is also the period over which `kChange` measures change.
  Priority priority = Priority::kChange;
  int32_t priority_window = 50;
  // Seed for kRandom and for weight initialisation.
  uint64_t seed = 0;
  // Decay of the running mean activation used by Imputation::kMean, and how often (in
  // steps) it is sampled: a full pass over the activations, so not every step.
  float mean_decay = 0.9f;
  int32_t mean_interval = 4;
  // Owner of each unit; empty = contiguous, as even as possible (see EvenOwnership).
  std::vector<RankId> owner_of_unit;
  // Activation recompute: trade one more forward's compute (without its collective) for
  // not holding this block's activations from Forward until Backward.
  bool recompute = false;
  // Torch's contract: gradients accumulate over every Backward until DiscardGradients
  // (zero_grad), across AdamWStep and step boundaries; false (C++ loops): the first
  // Backward after an AdamWStep or a new step writes them.
  bool keep_gradients = false;
};

class ParallelBlock {
 public:
  virtual ~ParallelBlock();
  ParallelBlock(const ParallelBlock&) = delete;
  ParallelBlock& operator=(const ParallelBlock&) = delete;

  BlockId id() const { return id_; }
  int32_t num_units() const { return num_units_; }
  int32_t hidden() const { return hidden_; }
  const std::vector<RankId>& owner_of_unit() const { return owner_of_unit_; }
  // Bytes of one unit's parameters: what offloading it moves to the helper once a step
  // (again after an AdamWStep within the step), and back once per Backward.
  size_t unit_bytes() const;
  // Floats of the dense layout that GatherDense returns and checkpoints hold.
  size_t dense_size() const { return DenseSize(); }
  // Unit ids this rank owns, in storage order.
  std::vector<int32_t> LocalUnits() const;
  // Fate of each of this rank's units in the current step, indexed like LocalUnits().
  std::vector<UnitFate> LocalFates() const;
  // The priority policy the next priority window ranks units by: UnitConfig::priority
  // until a plan names the job's (WorkloadPlan::priority).
  Priority priority() const { return config_.priority; }

  // x: (batch * seq) x hidden rows, replicated on every rank, in backend memory; it must
  // stay valid and unchanged until Backward (it is saved for the gradient, not copied).
  // y: same shape; receives the full (all-reduced) block output. Collective.
  // With `add_output_bias` false, y leaves out the replicated output bias (Megatron's
  // skip_bias_add: the caller adds it, fused with whatever follows); its gradient is the
  // column sum of dy either way, which is exact whenever the caller adds it to y.
  absl::Status Forward(const float* x, int32_t batch, int32_t seq, float* y,
                       bool add_output_bias = true);
  // dy: gradient w.r.t. y; dx receives the full gradient w.r.t. x. The first Backward
  // after the gradients were consumed (see has_gradients) writes the parameter gradients,
  // later ones (micro-batches; with keep_gradients also later steps) add to them. Pruned
  // units get none: the first Backward zeroes theirs, later ones leave what they hold
  // (with keep_gradients, a unit pruned in a later step keeps its pending gradient).
  // Collective. Differentiates the latest Forward, once.
  absl::Status Backward(const float* dy, float* dx);
  // True from a Backward until its gradients are consumed: by DiscardGradients, and
  // without UnitConfig::keep_gradients also by AdamWStep and the next step's start.
  bool has_gradients() const;
  // Drops the accumulated gradients: the next Backward writes instead of adding (what
  // zero_grad() means to a framework). Local; no collective.
  void DiscardGradients();
  // Bytes of activations this block holds for its Backward right now (0 with recompute:
  // its buffers are the group's shared ones).
  size_t activation_bytes() const;
  // Collective: the squared L2 norm of the whole block's gradients (every unit's, on
  // whichever rank holds it, pruned ones included: theirs are zero or, with
  // keep_gradients, pending from earlier steps; plus the replicated bias once), for
  // gradient clipping. For several blocks, GroupGradSquaredNorm pays one collective for
  // all of them.
  absl::StatusOr<double> GradSquaredNorm();
  // Scales this rank's gradients (its units' and the bias's) by `alpha`; with
  // GradSquaredNorm, this is clip-by-global-norm.
  absl::Status ScaleGradients(float alpha);
  // Host copy of the replicated output bias (hidden floats).
  std::vector<float> OutputBias() const;
  // Decoupled AdamW on this rank's shard: every unit computed this step (local and
  // offloaded units) and the replicated parameters, with the gradients accumulated since
  // they were last consumed. Pruned units' weights and moments are untouched, and their
  // step counts do not advance; with keep_gradients, a pruned unit's pending gradient stays
  // until DiscardGradients. FAILED_PRECONDITION without gradients (has_gradients).
  absl::Status AdamWStep(const AdamWOptions& options);

  // Dense (unsharded) copy of one field, row-major in the subclass's documented layout,
  // concatenated over its parameters. Collective; every rank receives the whole.
  absl::StatusOr<std::vector<float>> GatherDense(ParamField field);
  // Collective: every rank receives the whole checkpoint. Call between steps.
  absl::StatusOr<BlockCheckpoint> SaveCheckpoint();
  // Every rank passes the same checkpoint; each loads its own units. Call between steps.
  // Errors name the field whose size does not match this block.
  absl::Status RestoreCheckpoint(const BlockCheckpoint& checkpoint);
  // Timing of the current (or, after TpGroup::EndStep, the last) step.
  const BlockTiming& timing() const { return timing_; }
  // Running mean activation of a unit this rank owns (for kMean), host copy.
  absl::StatusOr<std::vector<float>> UnitMean(int32_t unit) const;

 protected:
  // One parameter tensor split by units: `unit_elems` floats per unit.
  struct ShardedParamSpec {
    std::string name;
    size_t unit_elems = 0;
  };
  // A contiguous range of units whose parameter slabs are given by pointers (one per
  // sharded parameter, in spec order), either in local storage or in a receive buffer.
  struct UnitRange {
    std::vector<float*> params;
    std::vector<float*> grads;
    // The range's unit ids, in slab order, for subclasses that read them (ReadsUnitIds);
    // empty otherwise.
    std::vector<int32_t> unit_ids;
    // Per unit, the slice [begin, end) of its work this range computes, when a plan
    // splits units (BlockPlan::replicas; only blocks whose UnitsDivide). Empty: every
    // unit whole. The subclass cuts a unit's work at the same fractions on every rank.
    std::vector<std::pair<double, double>> spans;
    std::vector<Buffer>* cache = nullptr;  // subclass activations for backward
    float* mean_out = nullptr;  // batch-mean activation per unit, or null (helper ranges)
    int32_t units = 0;
  };

  // The replicated part of every block is its output bias (`hidden` floats), added after
  // the all-reduce on every rank, then `replicated_extra` floats of the subclass's own
  // replicated parameters (a router: ParallelMoe). Every rank holds and updates them
  // alike; the subclass computes their gradient identically on every rank (EndBackward).
  ParallelBlock(TpGroup* group, BlockId id, int32_t num_units, int32_t hidden,
                std::vector<ShardedParamSpec> sharded, size_t mean_unit_elems, UnitConfig config,
                size_t replicated_extra = 0);
  // Allocates storage for the initial ownership and registers with the group.
  absl::Status Init();

  Compute& compute();
  uint64_t config_seed() const { return config_.seed; }
  // The replicated parameters (output bias first, then the extra) and their gradient, in
  // backend memory: replicated_size() floats each.
  size_t replicated_size() const { return replicated_size_; }
  const float* replicated() const;
  float* replicated_grad();
  // An all-reduce (sum) inside a subclass hook, timed as communication, not compute.
  absl::Status TimedAllReduceSum(float* data, size_t n);
  // (Re)allocates `buffer` to exactly n floats unless it has that size.
  absl::Status EnsureSize(Buffer& buffer, size_t n);
  // Blocks whose units divide (UnitsDivide) count their step's work in tokens, not whole
  // units (BlockTiming::unit_tokens, tokens_computed): the subclass adds each Forward's
  // tokens per unit (once per Forward, never for a recompute's) and the token rows it ran
  // through its ranges. Host counts: the block restarts them at BeginStep and reports them
  // at EndStep, as it does its timers.
  void CountForwardUnitTokens(absl::Span<const int32_t> tokens_per_unit);
  void CountTokensComputed(int64_t tokens);
  // The plan in force's BlockPlan::capacity_factor (0: no cap, or no plan); only blocks
  // whose units divide get one past the validator. Fixed for the step, as the plan is.
  double capacity_factor() const;

  // --- Hooks a subclass may override. ---
  // Whether a unit's work divides between ranks (plans may give it replicas that compute
  // slices of it: UnitRange::spans), as a mixture-of-experts expert's tokens do.
  virtual bool UnitsDivide() const { return false; }
  // Whether the subclass reads UnitRange::unit_ids: ranges then carry them, and an owner
  // sends its offloaded units' ids to their helper with the weights, once a step.
  virtual bool ReadsUnitIds() const { return false; }
  // Runs in Forward before any range, on every rank, with the forward's input (routing,
  // say). May run its own collectives (TimedAllReduceSum); every rank calls it alike.
  virtual absl::Status BeginForward(const float* /*x*/, int32_t /*batch*/, int32_t /*seq*/) {
    return absl::OkStatus();
  }
  // Runs in Backward after every range, before dx's all-reduce, with the Forward's input
  // x and dx this rank's partial sum: writes the extra replicated parameters' gradient (grad_beta
  // 0: overwrite, 1: add), and on rank 0 alone adds replicated contributions to dx (the all-reduce
  // then counts them once, and dx stays bitwise the same on every rank). May run its own
  // collectives (TimedAllReduceSum); every rank calls it alike.
  virtual absl::Status FinishBackward(const float* /*x*/, const float* /*dy*/, float* /*dx*/,
                                      float /*grad_beta*/) {
    return absl::OkStatus();
  }

  // --- Implemented by subclasses. ---
  // Dense layout <-> unit slabs. `dense` holds every parameter, concatenated. `unit` < 0
  // means no unit (only the replicated parameters: replicated_size() floats, the bias
  // first); a null `replicated` means none.
  virtual size_t DenseSize() const = 0;
  virtual void UnitToDense(int32_t unit, const std::vector<const float*>& slabs,
                           const float* replicated, float* dense) const = 0;
  virtual void DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                           float* replicated) const = 0;
  // Checks that batch x seq tokens fit (every index an int) and prepares per-shape state
  // (e.g. RoPE tables) before a Forward.
  virtual absl::Status PrepareShape(int32_t batch, int32_t seq) = 0;
  // Sizes of the activation buffers a range of `units` needs for batch x seq tokens.
  virtual std::vector<size_t> CacheSizes(int32_t units, int32_t batch, int32_t seq) const = 0;
  // z = beta * z + contribution of the range (z: tokens x hidden; beta is 0 for the first
  // range of a step, 1 after). Fills range.mean_out (batch-mean activation) if set. A null
  // z (recompute) stops once the cache holds what BackwardRange reads.
  virtual void ForwardRange(const UnitRange& range, const float* x, int32_t batch, int32_t seq,
                            float beta, float* z) = 0;
  // grads = grad_beta * grads + the range's parameter gradients (grad_beta 0 or 1);
  // dx = beta * dx + its input gradient.
  virtual void BackwardRange(const UnitRange& range, const float* x, const float* dz, int32_t batch,
                             int32_t seq, float beta, float grad_beta, float* dx) = 0;
  // out (1 x hidden) += sum over the range of mean activation (unit slab of `means`) times
  // the unit's output weights.
  virtual void ImputeRange(const UnitRange& range, const float* means, float* out) = 0;
  // Initial dense parameters, deterministic in (seed, block id), so every rank computes the
  // same values without communicating.
  virtual void InitDense(std::vector<float>& dense) const = 0;
  // Loads this rank's units (and the output bias) from a dense copy; resets optimizer
  // state and statistics, and drops the gradients (has_gradients turns false). Subclasses'
  // LoadDense check the layout and call this.
  absl::Status LoadDenseVector(const std::vector<float>& dense);

 private:
  friend class TpGroup;
  friend absl::StatusOr<double> GroupGradSquaredNorm(absl::Span<ParallelBlock* const> blocks);
  struct Storage;
  struct StepLayout;
  struct StepLayoutIn;
  struct SlabRef;

  // Called by TpGroup at step boundaries, identically on every rank. A priority replaces
  // the block's own from its next priority window on (none: it keeps its own).
  absl::Status ApplyPlan(const BlockPlan* plan, Imputation imputation,
                         std::optional<Priority> priority);
  absl::Status BeginStep(int64_t step);
  absl::Status EndStep();
  BlockShape Shape() const;

  absl::Status Reshard(const std::vector<RankId>& new_owner);
  // An offload's Exchange: timed as communication, and its receives as a link sample.
  // owners_send: the forward's weights (owners send), else the backward's gradients.
  absl::Status OffloadExchange(const std::vector<PeerTransfer>& sends,
                               const std::vector<PeerTransfer>& recvs, bool owners_send);
  absl::Status RollWindow(int64_t step);
  absl::Status Rebuild(const std::vector<SlabRef>& units);
  absl::Status ResetState();
  // Copies this rank's units of one stored field (FieldKind in block.cc), and the matching
  // replicated bias buffer, from a dense layout.
  void ScatterDense(int field_kind, const std::vector<float>& dense, Buffer& bias);
  absl::Status UpdateMeans(int32_t units, const float* batch_means);
  UnitRange StorageRange(int32_t first, int32_t count, std::vector<Buffer>* cache, float* mean_out);
  // Helper range `index` (this step's l.in[index]) over its receive buffers.
  UnitRange HelperRange(size_t index);
  // Sizes `cache` for a range; with `at_least`, keeps buffers that are already big enough
  // (the group's shared recompute buffers serve blocks of different shapes).
  absl::Status EnsureCache(std::vector<Buffer>& cache, int32_t units, int32_t batch, int32_t seq,
                           bool at_least = false);
  // The activation buffers of the local range or of helper range `index`.
  std::vector<Buffer>* RangeCache(int index);
  // Adds this rank's share of GradSquaredNorm (its units' gradients, and the bias on rank
  // 0) into `sum`, one float of backend memory. No collective, no host wait.
  void AddLocalGradSquaredNorm(float* sum);

 protected:
  TpGroup* group_;

 private:
  BlockId id_;
  int32_t num_units_;
  int32_t hidden_;
  size_t replicated_size_;
  std::vector<ShardedParamSpec> sharded_;
  size_t mean_unit_elems_;
  UnitConfig config_;
  std::vector<RankId> owner_of_unit_;
  bool registered_ = false;

  std::unique_ptr<Storage> storage_;
  std::unique_ptr<StepLayout> layout_;
  BlockTiming timing_;
  std::unique_ptr<IntervalTimer> compute_timer_;
  std::unique_ptr<IntervalTimer> comm_timer_;
  // Offload transfers that receive (a subset of comm_timer_'s time): BlockTiming::received.
  std::unique_ptr<IntervalTimer> receive_timer_;
};

// Collective: the squared L2 norm of several blocks' gradients, as GradSquaredNorm gives
// for each, summed, with one all-reduce for all of them instead of one each (clipping a
// 4-layer GPT's 8 blocks cost 8 collectives a step, each a wake-up of a throttled rank).
// Every rank of the group passes the same blocks in the same order (a block listed twice
// counts twice); the all-reduce's time counts in the first block's collective seconds.
// Errors, the same on every rank, before any collective: INVALID_ARGUMENT for a null block
// or blocks of different TP groups, FAILED_PRECONDITION naming a block without gradients.
// No blocks: 0, no collective.
absl::StatusOr<double> GroupGradSquaredNorm(absl::Span<ParallelBlock* const> blocks);

}  // namespace ballast

#endif  // BALLAST_BLOCK_H_
