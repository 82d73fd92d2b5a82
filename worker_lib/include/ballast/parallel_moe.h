// ParallelMoe: a mixture-of-experts layer whose experts are the block's units.
//
//   y = b2 + sum over the top-k experts e of token t: gate[t, e] * E_e(x_t),
//   E_e(x) = (silu(x W1_e) * (x W3_e)) W2_e                     (SwiGLU experts, no biases)
//
// The router (x Wr: hidden x experts logits, top-k and gates as Megatron-core's router,
// internal/moe_routing.h) is replicated: rank 0 computes the logits and one all-reduce
// shares them, so every rank routes alike even where its GEMMs would round differently.
// The input is replicated too (it is the previous block's all-reduced output), so each
// rank gathers its experts' tokens locally, and the combine is the block's one
// all-reduce: Megatron's "allgather" token dispatcher, with no dispatch traffic at all.
//
// An expert is a unit, so ParallelBlock's plans apply unchanged: an offloaded expert is
// computed whole by its helper for the step (its weights go there, its gradients come
// back; helpers learn which experts from the owner: ReadsUnitIds), a reshard moves an
// expert's ownership for good, and a pruned expert drops its tokens (it contributes
// nothing to them and receives no gradient, whatever the plan's imputation). An expert's
// work divides (UnitsDivide), so a plan may also give a hot expert replicas
// (BlockPlan::replicas): each computes its share of the expert's tokens (consecutive
// slices in token order, cut alike on every rank) with the expert's weights, and the
// owner adds the replicas' gradients to its own. A plan may also cap every expert's
// tokens (BlockPlan::capacity_factor): the tokens over an expert's capacity are dropped,
// alike on every rank and before the owner's and replicas' slices are cut, so replicas
// split the kept tokens (internal/moe_routing.h says how the cap meets the gradients).
//
// Backward: each rank adds dL/d(gate) of its experts' tokens into a tokens x experts
// matrix; one all-reduce of it (tokens x experts floats, small) lets every rank compute
// the router's gradient alike; rank 0 adds the router's share of dx before dx's
// all-reduce. Aux loss: see aux_loss() and set_aux_loss_scale().
//
// Activation buffers are sized for the worst case (every expert of a range receiving
// every token): experts / top_k times what a step uses.
#ifndef BALLAST_PARALLEL_MOE_H_
#define BALLAST_PARALLEL_MOE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/block.h"

namespace ballast {

namespace internal {
struct MoeRouting;
}  // namespace internal

struct MoeConfig {
  BlockId id;
  int32_t hidden = 0;
  // Each expert's SwiGLU intermediate size (Megatron's moe_ffn_hidden_size).
  int32_t ffn = 0;
  int32_t num_experts = 0;
  // Experts per token (moe_router_topk), 1 <= top_k <= num_experts.
  int32_t top_k = 2;
  // Megatron's moe_router_pre_softmax: gates are the full softmax's top-k probabilities;
  // false: the softmax over the top-k logits.
  bool pre_softmax = false;
  // Weight of the load-balancing loss (moe_aux_loss_coeff); 0: none.
  float aux_loss_coeff = 0.0f;
  UnitConfig units;
};

// Dense MoE parameters, row-major; GatherDense/LoadDense use their concatenation in this
// order: w1, w3 (experts x hidden x ffn each: gate and up), w2 (experts x ffn x hidden),
// router (hidden x experts: logits = x router), b2 (hidden).
struct MoeParams {
  std::vector<float> w1, w3, w2, router, b2;
  std::vector<float> Concat() const;
  static MoeParams Split(const std::vector<float>& dense, const MoeConfig& config);
};

class ParallelMoe final : public ParallelBlock {
 public:
  // Validates `config` (errors name the field), allocates this rank's experts, initialises
  // them deterministically from config.units.seed, and registers with `group`.
  static absl::StatusOr<std::unique_ptr<ParallelMoe>> Create(TpGroup* group,
                                                             const MoeConfig& config);
  ~ParallelMoe() override;
  // Every rank passes the same params; resets optimizer state.
  absl::Status LoadDense(const MoeParams& params);

  const MoeConfig& config() const { return config_; }
  // The load-balancing loss of the latest Forward (0 with aux_loss_coeff 0). Its gradient
  // enters every Backward scaled by aux_loss_scale (Megatron's MoEAuxLossAutoScaler: set it
  // to 1 / micro-batches when the main loss is averaged over them).
  double aux_loss() const;
  void set_aux_loss_scale(float scale) { aux_loss_scale_ = scale; }
  // Tokens routed to each expert by the latest Forward (top-k choices counted once each),
  // before any capacity cap: the router's load, which is what a plan balances.
  // A step's timing() carries every Forward's (BlockTiming::unit_tokens), and the token
  // rows this rank computed (tokens_computed: a pruned expert's count none, an offload's
  // count on its helper, a replica's slice on the rank that computes it).
  std::vector<int32_t> expert_tokens() const;
  // The (token, expert) pairs the plan's capacity cap (BlockPlan::capacity_factor) dropped
  // in the latest Forward, over all experts (0 without a cap): what quality is measured
  // against. Alike on every rank.
  int64_t dropped_tokens() const;
  // A fixed, untrained bias added to every token's router logits from the next Forward on
  // (num_experts floats; empty: none): how a benchmark dials routing skew (log of a Zipf
  // distribution makes a few experts hot). Rank 0's is the group's, as its logits are.
  // INVALID_ARGUMENT for a wrong size or a value that is not finite.
  absl::Status SetRouterBias(const std::vector<float>& bias);

 protected:
  size_t DenseSize() const override;
  void UnitToDense(int32_t unit, const std::vector<const float*>& slabs, const float* replicated,
                   float* dense) const override;
  void DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                   float* replicated) const override;
  absl::Status PrepareShape(int32_t batch, int32_t seq) override;
  std::vector<size_t> CacheSizes(int32_t units, int32_t batch, int32_t seq) const override;
  bool ReadsUnitIds() const override { return true; }
  bool UnitsDivide() const override { return true; }
  absl::Status BeginForward(const float* x, int32_t batch, int32_t seq) override;
  void ForwardRange(const UnitRange& range, const float* x, int32_t batch, int32_t seq, float beta,
                    float* z) override;
  void BackwardRange(const UnitRange& range, const float* x, const float* dz, int32_t batch,
                     int32_t seq, float beta, float grad_beta, float* dx) override;
  absl::Status FinishBackward(const float* x, const float* dy, float* dx, float grad_beta) override;
  void ImputeRange(const UnitRange& range, const float* means, float* out) override;
  void InitDense(std::vector<float>& dense) const override;

 private:
  explicit ParallelMoe(TpGroup* group, const MoeConfig& config);

  MoeConfig config_;
  float aux_loss_scale_ = 1.0f;
  std::unique_ptr<internal::MoeRouting> routing_;  // the latest Forward's
  Buffer logits_;                                  // tokens x experts
  Buffer dgate_;        // tokens x experts: dL/d gate, summed over ranks in FinishBackward
  Buffer dlogits_;      // tokens x experts
  Buffer router_bias_;  // experts, or empty
};

}  // namespace ballast

#endif  // BALLAST_PARALLEL_MOE_H_
