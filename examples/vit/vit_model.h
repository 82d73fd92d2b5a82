// A Vision Transformer (pre-norm, mean-pooled, no class token) for 28x28 grey images,
// tensor-parallel over a TpGroup: every attention and MLP block is a worker_lib
// ParallelAttention / ParallelMlp, so Ballast's plans (pruning, offloading, resharding)
// apply to them; the patch embedding, position embedding, LayerNorms and classifier are
// replicated on every rank (each computes the same values from the same all-reduced
// activations, so they stay identical without communication).
//
//   h_0     = patches(x) W_p + b_p + pos
//   m_l     = h_l + Attention_l(LN1_l(h_l))
//   h_{l+1} = m_l + Mlp_l(LN2_l(m_l))
//   logits  = mean_tokens(LN_f(h_L)) W_c + b_c
//
// Thread-compatible; all calls on the training thread, every rank in the same order.
#ifndef BALLAST_EXAMPLES_VIT_VIT_MODEL_H_
#define BALLAST_EXAMPLES_VIT_VIT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/ballast.h"

namespace ballast::vit {

struct VitConfig {
  int32_t image_size = 28;
  int32_t patch_size = 7;  // 16 tokens of 49 pixels
  int32_t hidden = 192;
  int32_t heads = 6;  // one head is one unit of an attention block
  int32_t layers = 3;
  int32_t mlp_ratio = 4;
  int32_t mlp_unit_size = 32;  // neurons per unit of an MLP block
  int32_t classes = 10;
  // Largest batch a step may use (buffers are sized for it once).
  int32_t max_batch = 256;
  uint64_t seed = 1;
  // Which units a rank prunes first when a plan asks it to prune.
  Priority priority = Priority::kChange;
  float layer_norm_eps = 1e-5f;

  int32_t tokens() const { return (image_size / patch_size) * (image_size / patch_size); }
  int32_t patch_pixels() const { return patch_size * patch_size; }
};

// INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateVitConfig(const VitConfig& config);

struct BatchResult {
  double loss = 0;      // mean cross-entropy over the batch
  int32_t correct = 0;  // argmax predictions equal to the label
};

class Vit {
 public:
  // Creates the blocks on `group` (which must outlive the model) and initialises every
  // parameter deterministically from config.seed: the same on every rank.
  static absl::StatusOr<std::unique_ptr<Vit>> Create(TpGroup* group, const VitConfig& config);

  // Forward, cross-entropy, backward and one AdamW step. Collective; call between the
  // group's BeginStep and EndStep. `pixels` holds batch * 28 * 28 bytes, `labels` batch
  // class ids (host memory, identical on every rank).
  absl::StatusOr<BatchResult> TrainBatch(const uint8_t* pixels, const uint8_t* labels,
                                         int32_t batch, const AdamWOptions& adamw);
  // Forward and loss only, under the plan in force. Collective, inside a step.
  absl::StatusOr<BatchResult> EvalBatch(const uint8_t* pixels, const uint8_t* labels,
                                        int32_t batch);

  // Checkpoint of the whole model (parameters and optimizer state) plus the caller's step
  // counter. Collective: every rank calls it between steps; rank 0 writes `path`
  // atomically (temporary file, fsync, rename).
  absl::Status SaveCheckpoint(const std::string& path, int64_t step);
  // Every rank reads `path` and restores its shard; returns the saved step. Errors name
  // the file and the mismatch (another model shape, truncated file, ...).
  absl::StatusOr<int64_t> LoadCheckpoint(const std::string& path);

  const VitConfig& config() const { return config_; }
  std::vector<ParallelBlock*> blocks() const;

  ~Vit();

 private:
  struct Param;
  struct Activations;
  Vit(TpGroup* group, const VitConfig& config);
  absl::Status Init();
  absl::StatusOr<BatchResult> Forward(const uint8_t* pixels, const uint8_t* labels,
                                      int32_t batch, bool for_training);
  absl::Status Backward(int32_t batch);
  absl::Status ApplyAdamW(const AdamWOptions& adamw);
  Compute& compute() { return group_->backend().compute(); }

  TpGroup* group_;
  VitConfig config_;
  std::vector<std::unique_ptr<ParallelAttention>> attention_;
  std::vector<std::unique_ptr<ParallelMlp>> mlp_;
  std::vector<std::unique_ptr<Param>> params_;
  // Named handles into params_.
  Param *patch_w_ = nullptr, *patch_b_ = nullptr, *pos_ = nullptr, *final_gamma_ = nullptr,
        *final_beta_ = nullptr, *head_w_ = nullptr, *head_b_ = nullptr;
  std::vector<Param*> ln1_gamma_, ln1_beta_, ln2_gamma_, ln2_beta_;
  int64_t replicated_step_ = 0;
  std::unique_ptr<Activations> act_;
};

}  // namespace ballast::vit

#endif  // BALLAST_EXAMPLES_VIT_VIT_MODEL_H_
