// ParallelMlp: a tensor-parallel transformer MLP with W1 column-parallel and W2
// row-parallel (Megatron-LM), executing a WorkloadPlan. Two activations:
//
//   kGelu:   y = gelu(x W1 + b1) W2 + b2                        (GPT-2, ViT; tanh GELU)
//   kSwiGlu: y = (silu(x W1 + b1) * (x W3 + b3)) W2 + b2         (Llama; W1 gate, W3 up)
//
// Units are tiles of `unit_size` consecutive intermediate neurons: unit u covers columns
// [u*unit_size, (u+1)*unit_size) of W1 and b1 (and of W3 and b3 under SwiGLU, so a gate
// neuron and its up neuron always travel together) and the same rows of W2.
//
//   ballast::MlpConfig config;
//   config.id = ballast::BlockId(1);
//   config.hidden = 768; config.intermediate = 3072; config.unit_size = 64;
//   auto mlp = ballast::ParallelMlp::Create(group, config);   // registers with the group
//   (*mlp)->Forward(x, batch, seq, y);
//   (*mlp)->Backward(dy, dx);
//   (*mlp)->AdamWStep(adamw);
#ifndef BALLAST_PARALLEL_MLP_H_
#define BALLAST_PARALLEL_MLP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/block.h"

namespace ballast {

enum class MlpActivation { kGelu, kSwiGlu };

struct MlpConfig {
  BlockId id;
  MlpActivation activation = MlpActivation::kGelu;
  int32_t hidden = 0;
  int32_t intermediate = 0;
  // Neurons per unit; must divide `intermediate`. 64 or 128 keep GEMMs efficient.
  int32_t unit_size = 64;
  UnitConfig units;
};

// Dense MLP parameters, row-major. GatherDense/LoadDense use their concatenation in this
// order: w1 (hidden x intermediate), b1 (intermediate), then under SwiGLU w3 and b3 (the
// same shapes), then w2 (intermediate x hidden), b2 (hidden). w3 and b3 are empty for GELU.
struct MlpParams {
  std::vector<float> w1, b1, w3, b3, w2, b2;
  std::vector<float> Concat() const;
  static MlpParams Split(const std::vector<float>& dense, int32_t hidden, int32_t intermediate,
                         MlpActivation activation = MlpActivation::kGelu);
};

class ParallelMlp final : public ParallelBlock {
 public:
  // Validates `config`, allocates this rank's shard, initialises it deterministically from
  // config.units.seed, and registers the block with `group` (which must outlive it).
  static absl::StatusOr<std::unique_ptr<ParallelMlp>> Create(TpGroup* group,
                                                             const MlpConfig& config);
  // Replaces this rank's shard (and the replicated b2) with the matching slices of
  // `params`, and resets optimizer state. Every rank passes the same params.
  absl::Status LoadDense(const MlpParams& params);

  int32_t intermediate() const { return intermediate_; }
  int32_t unit_size() const { return unit_size_; }
  MlpActivation activation() const { return activation_; }

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
  ParallelMlp(TpGroup* group, const MlpConfig& config);
  bool gated() const { return activation_ == MlpActivation::kSwiGlu; }

  MlpActivation activation_;
  int32_t intermediate_;
  int32_t unit_size_;
};

}  // namespace ballast

#endif  // BALLAST_PARALLEL_MLP_H_
