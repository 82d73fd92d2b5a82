// ParallelAttention: tensor-parallel self-attention with the QKV projection column-parallel
// by heads and the output projection row-parallel (Megatron-LM), executing a WorkloadPlan.
//
//   y = concat_h(softmax(Q_h K_g(h)^T / sqrt(d) [+ causal mask]) V_g(h)) Wo + bo,
//   Q_h = rope(x Wq[:, h] + bq[h]),  K_g = rope(x Wk[:, g] + bk[g]),  V_g = x Wv[:, g] + bv[g]
//
// Grouped-query attention (GQA): the query heads split into `num_query_groups` groups of
// consecutive heads that share one K/V head (query head h uses group h / (heads / groups),
// as Hugging Face's repeat_kv does). One unit is one group: its query heads, its K/V head
// and its rows of Wo, so pruning or migrating a unit never splits a group. Multi-head
// attention is the case groups == heads (the default), multi-query attention groups == 1.
// Options: a causal mask (position t attends to positions <= t, for decoders) and rotary
// position embeddings (RoPE, rotate-half convention, applied to Q and K inside the block;
// positions restart at 0 in every sequence).
//
//   ballast::AttentionConfig config;
//   config.id = ballast::BlockId(0);
//   config.hidden = 1024; config.num_heads = 16; config.head_dim = 64;
//   config.num_query_groups = 4; config.causal = true; config.rotary = true;
//   auto attn = ballast::ParallelAttention::Create(group, config);
//   (*attn)->Forward(x, batch, seq, y);   // x: (batch * seq) x hidden, sequences contiguous
#ifndef BALLAST_PARALLEL_ATTENTION_H_
#define BALLAST_PARALLEL_ATTENTION_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/block.h"
#include "ballast/compute.h"

namespace ballast {

struct AttentionConfig {
  BlockId id;
  int32_t hidden = 0;
  int32_t num_heads = 0;  // query heads
  int32_t head_dim = 0;
  // K/V heads; each serves num_heads / num_query_groups query heads. 0 = num_heads (MHA).
  int32_t num_query_groups = 0;
  bool causal = false;
  bool rotary = false;  // RoPE on Q and K; needs an even head_dim
  float rotary_base = 10000.0f;
  UnitConfig units;
};

// Dense attention parameters, row-major, concatenated in this order for GatherDense and
// LoadDense: wq (hidden x heads*d, head h = columns [h*d, (h+1)*d)), wk, wv (hidden x
// groups*d), bq (heads*d), bk, bv (groups*d), wo (heads*d x hidden), bo (hidden).
struct AttentionParams {
  std::vector<float> wq, wk, wv, bq, bk, bv, wo, bo;
  std::vector<float> Concat() const;
  static AttentionParams Split(const std::vector<float>& dense, int32_t hidden,
                               int32_t num_heads, int32_t head_dim, int32_t num_query_groups = 0);
};

class ParallelAttention final : public ParallelBlock {
 public:
  static absl::StatusOr<std::unique_ptr<ParallelAttention>> Create(
      TpGroup* group, const AttentionConfig& config);
  absl::Status LoadDense(const AttentionParams& params);

  int32_t num_heads() const { return num_units() * heads_per_group_; }
  int32_t num_query_groups() const { return num_units(); }
  int32_t head_dim() const { return head_dim_; }

 protected:
  size_t DenseSize() const override;
  void UnitToDense(int32_t unit, const std::vector<const float*>& slabs, const float* replicated,
                   float* dense) const override;
  void DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                   float* replicated) const override;
  absl::Status PrepareShape(int32_t batch, int32_t seq) override;
  std::vector<size_t> CacheSizes(int32_t units, int32_t batch, int32_t seq) const override;
  void ForwardRange(const UnitRange& range, const float* x, int32_t batch, int32_t seq,
                    float beta, float* z) override;
  void BackwardRange(const UnitRange& range, const float* x, const float* dz, int32_t batch,
                     int32_t seq, float beta, float grad_beta, float* dx) override;
  void ImputeRange(const UnitRange& range, const float* means, float* out) override;
  void InitDense(std::vector<float>& dense) const override;

 private:
  ParallelAttention(TpGroup* group, const AttentionConfig& config);
  // Fills the RoPE tables for sequences of `seq` tokens (computed in double on the host).
  absl::Status EnsureRotaryTables(int32_t seq);

  int32_t head_dim_;
  int32_t heads_per_group_;
  bool causal_;
  bool rotary_;
  float rotary_base_;
  int32_t rotary_seq_ = 0;  // sequence length the tables hold
  Buffer rotary_cos_, rotary_sin_;
};

}  // namespace ballast

#endif  // BALLAST_PARALLEL_ATTENTION_H_
