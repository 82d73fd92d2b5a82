// ParallelAttention: tensor-parallel multi-head self-attention (bidirectional, as in ViT),
// with the QKV projection column-parallel by heads and the output projection row-parallel
// (Megatron-LM), executing a WorkloadPlan. One unit is one head.
//
//   y = concat_h(softmax(Q_h K_h^T / sqrt(d)) V_h) Wo + bo,  Q_h = x Wq[:, h] + bq[h], ...
//
//   ballast::AttentionConfig config;
//   config.id = ballast::BlockId(0);
//   config.hidden = 768; config.num_heads = 12; config.head_dim = 64;
//   auto attn = ballast::ParallelAttention::Create(group, config);
//   (*attn)->Forward(x, batch, seq, y);   // x: (batch * seq) x hidden
#ifndef BALLAST_PARALLEL_ATTENTION_H_
#define BALLAST_PARALLEL_ATTENTION_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/block.h"

namespace ballast {

struct AttentionConfig {
  BlockId id;
  int32_t hidden = 0;
  int32_t num_heads = 0;
  int32_t head_dim = 0;
  UnitConfig units;
};

// Dense attention parameters, row-major, concatenated in this order for GatherDense and
// LoadDense: wq, wk, wv (hidden x heads*head_dim, head h = columns [h*d, (h+1)*d)),
// bq, bk, bv (heads*head_dim), wo (heads*head_dim x hidden), bo (hidden).
struct AttentionParams {
  std::vector<float> wq, wk, wv, bq, bk, bv, wo, bo;
  std::vector<float> Concat() const;
  static AttentionParams Split(const std::vector<float>& dense, int32_t hidden,
                               int32_t num_heads, int32_t head_dim);
};

class ParallelAttention final : public ParallelBlock {
 public:
  static absl::StatusOr<std::unique_ptr<ParallelAttention>> Create(
      TpGroup* group, const AttentionConfig& config);
  absl::Status LoadDense(const AttentionParams& params);

  int32_t num_heads() const { return num_units(); }
  int32_t head_dim() const { return head_dim_; }

 protected:
  size_t DenseSize() const override;
  void UnitToDense(int32_t unit, const std::vector<const float*>& slabs, const float* replicated,
                   float* dense) const override;
  void DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                   float* replicated) const override;
  absl::Status ValidateShape(int32_t batch, int32_t seq) const override;
  std::vector<size_t> CacheSizes(int32_t units, int32_t batch, int32_t seq) const override;
  void ForwardRange(const UnitRange& range, const float* x, int32_t batch, int32_t seq,
                    float beta, float* z) override;
  void BackwardRange(const UnitRange& range, const float* x, const float* dz, int32_t batch,
                     int32_t seq, float beta, float* dx) override;
  void ImputeRange(const UnitRange& range, const float* means, float* out) override;
  void InitDense(std::vector<float>& dense) const override;

 private:
  ParallelAttention(TpGroup* group, const AttentionConfig& config);
  int32_t head_dim_;
};

}  // namespace ballast

#endif  // BALLAST_PARALLEL_ATTENTION_H_
