#include "examples/vit/vit_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ballast::vit {
namespace {

// Fashion-MNIST's pixel mean and standard deviation (of value / 255).
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

constexpr char kMagic[8] = {'B', 'V', 'I', 'T', 'C', 'K', 'P', '1'};

// Little binary writer/reader for the checkpoint: fixed-width fields, checked lengths.
class Writer {
 public:
  template <typename T>
  void Put(const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    const char* p = reinterpret_cast<const char*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::vector<char> bytes_;
};

class Reader {
 public:
  Reader(std::vector<char> bytes, std::string path) : bytes_(std::move(bytes)), path_(path) {}
  template <typename T>
  absl::StatusOr<T> Get(const char* what) {
    if (pos_ + sizeof(T) > bytes_.size()) return Truncated(what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> GetVector(const char* what, size_t expected) {
    BALLAST_ASSIGN_OR_RETURN(uint64_t n, Get<uint64_t>(what));
    if (n != expected) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what, " has ", n,
                                                     " elements, this model expects ", expected));
    }
    if (pos_ + n * sizeof(T) > bytes_.size()) return Truncated(what);
    std::vector<T> v(n);
    std::memcpy(v.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  absl::Status Truncated(const char* what) {
    return absl::DataLossError(absl::StrCat(path_, ": truncated at ", what));
  }
  std::vector<char> bytes_;
  std::string path_;
  size_t pos_ = 0;
};

absl::Status WriteFileAtomically(const std::string& path, const std::vector<char>& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create"));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
    }
    done += static_cast<size_t>(n);
  }
  // A checkpoint that is renamed into place before it is durable can be empty after a crash.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return absl::DataLossError(absl::StrCat(tmp, ": fsync/close failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat("rename ", tmp, " -> ", path, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace

// One replicated parameter tensor with its gradient and AdamW moments.
struct Vit::Param {
  std::string name;
  size_t size = 0;
  bool decay = true;  // weight decay applies to matrices, not to norms, biases, embeddings
  Buffer value, grad, m, v;
};

// Per-step activations, sized once for max_batch.
struct Vit::Activations {
  Buffer patches;                  // tokens x patch_pixels
  std::vector<Buffer> h;           // layers + 1, tokens x hidden: residual stream
  std::vector<Buffer> mid;         // layers: after attention
  std::vector<Buffer> ln1, ln2;    // layers: LayerNorm outputs (block inputs)
  std::vector<Buffer> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
  Buffer final_out, final_mean, final_rstd;
  Buffer block_out;                // a block's output
  Buffer pooled, logits;           // batch x hidden, batch x classes
  Buffer dlogits, dpooled, dh, dblock, dtmp;
  std::vector<float> host_patches, host_logits, host_dlogits;
  std::vector<uint8_t> labels;
};

absl::Status ValidateVitConfig(const VitConfig& c) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (c.image_size <= 0 || c.patch_size <= 0 || c.image_size % c.patch_size != 0) {
    return bad(absl::StrCat("patch_size ", c.patch_size, " must divide image_size ",
                            c.image_size));
  }
  if (c.hidden <= 0 || c.heads <= 0 || c.hidden % c.heads != 0) {
    return bad(absl::StrCat("heads ", c.heads, " must divide hidden ", c.hidden));
  }
  if (c.layers <= 0) return bad(absl::StrCat("layers ", c.layers, " must be > 0"));
  if (c.mlp_ratio <= 0) return bad(absl::StrCat("mlp_ratio ", c.mlp_ratio, " must be > 0"));
  if (c.mlp_unit_size <= 0 || (c.hidden * c.mlp_ratio) % c.mlp_unit_size != 0) {
    return bad(absl::StrCat("mlp_unit_size ", c.mlp_unit_size, " must divide the MLP width ",
                            c.hidden * c.mlp_ratio));
  }
  if (c.classes <= 1) return bad(absl::StrCat("classes ", c.classes, " must be > 1"));
  if (c.max_batch <= 0 || c.max_batch > 65536) {
    return bad(absl::StrCat("max_batch ", c.max_batch, " out of range [1, 65536]"));
  }
  return absl::OkStatus();
}

Vit::Vit(TpGroup* group, const VitConfig& config)
    : group_(group), config_(config), act_(std::make_unique<Activations>()) {}
Vit::~Vit() = default;

absl::StatusOr<std::unique_ptr<Vit>> Vit::Create(TpGroup* group, const VitConfig& config) {
  BALLAST_RETURN_IF_ERROR(ValidateVitConfig(config));
  std::unique_ptr<Vit> vit(new Vit(group, config));
  BALLAST_RETURN_IF_ERROR(vit->Init());
  return vit;
}

absl::Status Vit::Init() {
  const VitConfig& c = config_;
  Compute& cm = compute();
  for (int32_t l = 0; l < c.layers; ++l) {
    AttentionConfig attn;
    attn.id = BlockId(2 * l);
    attn.hidden = c.hidden;
    attn.num_heads = c.heads;
    attn.head_dim = c.hidden / c.heads;
    attn.units.seed = c.seed;
    attn.units.priority = c.priority;
    BALLAST_ASSIGN_OR_RETURN(auto a, ParallelAttention::Create(group_, attn));
    attention_.push_back(std::move(a));
    MlpConfig mlp;
    mlp.id = BlockId(2 * l + 1);
    mlp.hidden = c.hidden;
    mlp.intermediate = c.hidden * c.mlp_ratio;
    mlp.unit_size = c.mlp_unit_size;
    mlp.units.seed = c.seed;
    mlp.units.priority = c.priority;
    BALLAST_ASSIGN_OR_RETURN(auto m, ParallelMlp::Create(group_, mlp));
    mlp_.push_back(std::move(m));
  }

  // Replicated parameters, initialised from one generator in a fixed order.
  std::mt19937_64 rng(c.seed * 0x9e3779b97f4a7c15ull + 17);
  auto add = [&](const std::string& name, size_t size, bool decay, float stddev,
                 float constant) -> absl::StatusOr<Param*> {
    auto p = std::make_unique<Param>();
    p->name = name;
    p->size = size;
    p->decay = decay;
    BALLAST_ASSIGN_OR_RETURN(p->value, cm.Allocate(size));
    BALLAST_ASSIGN_OR_RETURN(p->grad, cm.Allocate(size));
    BALLAST_ASSIGN_OR_RETURN(p->m, cm.Allocate(size));
    BALLAST_ASSIGN_OR_RETURN(p->v, cm.Allocate(size));
    std::vector<float> host(size, constant);
    if (stddev > 0) {
      std::normal_distribution<float> normal(0.0f, stddev);
      for (float& x : host) x = std::clamp(normal(rng), -2 * stddev, 2 * stddev);
    }
    cm.CopyFromHost(host.data(), p->value.data(), size);
    params_.push_back(std::move(p));
    return params_.back().get();
  };
  const size_t d = c.hidden;
  BALLAST_ASSIGN_OR_RETURN(patch_w_, add("patch_w", c.patch_pixels() * d, true,
                                         1.0f / std::sqrt(static_cast<float>(c.patch_pixels())),
                                         0));
  BALLAST_ASSIGN_OR_RETURN(patch_b_, add("patch_b", d, false, 0, 0));
  BALLAST_ASSIGN_OR_RETURN(pos_, add("pos", c.tokens() * d, false, 0.02f, 0));
  for (int32_t l = 0; l < c.layers; ++l) {
    BALLAST_ASSIGN_OR_RETURN(Param * g1, add(absl::StrCat("ln1_gamma_", l), d, false, 0, 1));
    BALLAST_ASSIGN_OR_RETURN(Param * b1, add(absl::StrCat("ln1_beta_", l), d, false, 0, 0));
    BALLAST_ASSIGN_OR_RETURN(Param * g2, add(absl::StrCat("ln2_gamma_", l), d, false, 0, 1));
    BALLAST_ASSIGN_OR_RETURN(Param * b2, add(absl::StrCat("ln2_beta_", l), d, false, 0, 0));
    ln1_gamma_.push_back(g1);
    ln1_beta_.push_back(b1);
    ln2_gamma_.push_back(g2);
    ln2_beta_.push_back(b2);
  }
  BALLAST_ASSIGN_OR_RETURN(final_gamma_, add("final_gamma", d, false, 0, 1));
  BALLAST_ASSIGN_OR_RETURN(final_beta_, add("final_beta", d, false, 0, 0));
  BALLAST_ASSIGN_OR_RETURN(head_w_, add("head_w", d * c.classes, true,
                                        1.0f / std::sqrt(static_cast<float>(d)), 0));
  BALLAST_ASSIGN_OR_RETURN(head_b_, add("head_b", c.classes, false, 0, 0));

  // Activations for the largest batch.
  Activations& a = *act_;
  const size_t rows = static_cast<size_t>(c.max_batch) * c.tokens();
  auto alloc = [&](Buffer& b, size_t n) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(b, cm.Allocate(n));
    return absl::OkStatus();
  };
  BALLAST_RETURN_IF_ERROR(alloc(a.patches, rows * c.patch_pixels()));
  a.h.resize(c.layers + 1);
  for (Buffer& b : a.h) BALLAST_RETURN_IF_ERROR(alloc(b, rows * d));
  for (auto* v : {&a.mid, &a.ln1, &a.ln2}) {
    v->resize(c.layers);
    for (Buffer& b : *v) BALLAST_RETURN_IF_ERROR(alloc(b, rows * d));
  }
  for (auto* v : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
    v->resize(c.layers);
    for (Buffer& b : *v) BALLAST_RETURN_IF_ERROR(alloc(b, rows));
  }
  BALLAST_RETURN_IF_ERROR(alloc(a.final_out, rows * d));
  BALLAST_RETURN_IF_ERROR(alloc(a.final_mean, rows));
  BALLAST_RETURN_IF_ERROR(alloc(a.final_rstd, rows));
  for (Buffer* b : {&a.block_out, &a.dh, &a.dblock, &a.dtmp}) {
    BALLAST_RETURN_IF_ERROR(alloc(*b, rows * d));
  }
  BALLAST_RETURN_IF_ERROR(alloc(a.pooled, c.max_batch * d));
  BALLAST_RETURN_IF_ERROR(alloc(a.dpooled, c.max_batch * d));
  BALLAST_RETURN_IF_ERROR(alloc(a.logits, c.max_batch * c.classes));
  BALLAST_RETURN_IF_ERROR(alloc(a.dlogits, c.max_batch * c.classes));
  a.host_patches.resize(rows * c.patch_pixels());
  a.host_logits.resize(c.max_batch * c.classes);
  a.host_dlogits.resize(c.max_batch * c.classes);
  return cm.Synchronize();
}

std::vector<ParallelBlock*> Vit::blocks() const {
  std::vector<ParallelBlock*> out;
  for (int32_t l = 0; l < config_.layers; ++l) {
    out.push_back(attention_[l].get());
    out.push_back(mlp_[l].get());
  }
  return out;
}

absl::StatusOr<BatchResult> Vit::Forward(const uint8_t* pixels, const uint8_t* labels,
                                         int32_t batch, bool for_training) {
  const VitConfig& c = config_;
  if (batch <= 0 || batch > c.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " out of range [1, max_batch=", c.max_batch, "]"));
  }
  Compute& cm = compute();
  Activations& a = *act_;
  const int32_t tokens = c.tokens(), d = c.hidden, pp = c.patch_pixels();
  const int32_t rows = batch * tokens;
  const int32_t per_side = c.image_size / c.patch_size;

  // Patchify on the host (a pure reshape), normalising pixels on the way.
  for (int32_t b = 0; b < batch; ++b) {
    const uint8_t* img = pixels + static_cast<size_t>(b) * c.image_size * c.image_size;
    for (int32_t t = 0; t < tokens; ++t) {
      const int32_t py = t / per_side, px = t % per_side;
      float* out = a.host_patches.data() + (static_cast<size_t>(b) * tokens + t) * pp;
      for (int32_t y = 0; y < c.patch_size; ++y) {
        for (int32_t x = 0; x < c.patch_size; ++x) {
          const uint8_t v =
              img[(py * c.patch_size + y) * c.image_size + px * c.patch_size + x];
          out[y * c.patch_size + x] = (v / 255.0f - kPixelMean) / kPixelStd;
        }
      }
    }
  }
  cm.CopyFromHost(a.host_patches.data(), a.patches.data(), static_cast<size_t>(rows) * pp);

  // h_0 = patches W_p + b_p + pos.
  float* h0 = a.h[0].data();
  cm.Gemm(false, false, rows, d, pp, 1.0f, a.patches.data(), pp, patch_w_->value.data(), d, 0.0f,
          h0, d);
  cm.AddRowVector(h0, rows, d, d, patch_b_->value.data());
  for (int32_t b = 0; b < batch; ++b) {
    cm.Axpy(1.0f, pos_->value.data(), h0 + static_cast<size_t>(b) * tokens * d,
            static_cast<size_t>(tokens) * d);
  }

  const size_t n = static_cast<size_t>(rows) * d;
  for (int32_t l = 0; l < c.layers; ++l) {
    cm.LayerNormForward(a.h[l].data(), ln1_gamma_[l]->value.data(), ln1_beta_[l]->value.data(),
                        rows, d, c.layer_norm_eps, a.ln1[l].data(), a.ln1_mean[l].data(),
                        a.ln1_rstd[l].data());
    BALLAST_RETURN_IF_ERROR(attention_[l]->Forward(a.ln1[l].data(), batch, tokens,
                                                   a.block_out.data()));
    cm.Copy(a.h[l].data(), a.mid[l].data(), n);
    cm.Axpy(1.0f, a.block_out.data(), a.mid[l].data(), n);
    cm.LayerNormForward(a.mid[l].data(), ln2_gamma_[l]->value.data(), ln2_beta_[l]->value.data(),
                        rows, d, c.layer_norm_eps, a.ln2[l].data(), a.ln2_mean[l].data(),
                        a.ln2_rstd[l].data());
    BALLAST_RETURN_IF_ERROR(mlp_[l]->Forward(a.ln2[l].data(), batch, tokens, a.block_out.data()));
    cm.Copy(a.mid[l].data(), a.h[l + 1].data(), n);
    cm.Axpy(1.0f, a.block_out.data(), a.h[l + 1].data(), n);
  }
  cm.LayerNormForward(a.h[c.layers].data(), final_gamma_->value.data(),
                      final_beta_->value.data(), rows, d, c.layer_norm_eps, a.final_out.data(),
                      a.final_mean.data(), a.final_rstd.data());
  for (int32_t b = 0; b < batch; ++b) {
    cm.ColumnSum(a.final_out.data() + static_cast<size_t>(b) * tokens * d, tokens, d, d,
                 1.0f / tokens, 0.0f, a.pooled.data() + static_cast<size_t>(b) * d);
  }
  cm.Gemm(false, false, batch, c.classes, d, 1.0f, a.pooled.data(), d, head_w_->value.data(),
          c.classes, 0.0f, a.logits.data(), c.classes);
  cm.AddRowVector(a.logits.data(), batch, c.classes, c.classes, head_b_->value.data());
  cm.CopyToHost(a.logits.data(), a.host_logits.data(), static_cast<size_t>(batch) * c.classes);
  BALLAST_RETURN_IF_ERROR(cm.Synchronize());

  // Softmax cross-entropy on the host: batch x classes is tiny.
  BatchResult result;
  for (int32_t b = 0; b < batch; ++b) {
    const float* z = a.host_logits.data() + static_cast<size_t>(b) * c.classes;
    float* dz = a.host_dlogits.data() + static_cast<size_t>(b) * c.classes;
    const int32_t label = labels[b];
    if (label < 0 || label >= c.classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " of example ", b, " is not a class"));
    }
    const float max_z = *std::max_element(z, z + c.classes);
    double sum = 0;
    for (int32_t k = 0; k < c.classes; ++k) sum += std::exp(static_cast<double>(z[k] - max_z));
    result.loss += std::log(sum) - (z[label] - max_z);
    if (std::max_element(z, z + c.classes) - z == label) ++result.correct;
    if (for_training) {
      for (int32_t k = 0; k < c.classes; ++k) {
        const double p = std::exp(static_cast<double>(z[k] - max_z)) / sum;
        dz[k] = static_cast<float>((p - (k == label ? 1.0 : 0.0)) / batch);
      }
    }
  }
  result.loss /= batch;
  if (!std::isfinite(result.loss)) {
    return absl::InternalError(absl::StrCat("loss is ", result.loss, " (training diverged)"));
  }
  return result;
}

absl::Status Vit::Backward(int32_t batch) {
  const VitConfig& c = config_;
  Compute& cm = compute();
  Activations& a = *act_;
  const int32_t tokens = c.tokens(), d = c.hidden, pp = c.patch_pixels();
  const int32_t rows = batch * tokens;
  const size_t n = static_cast<size_t>(rows) * d;

  cm.CopyFromHost(a.host_dlogits.data(), a.dlogits.data(), static_cast<size_t>(batch) * c.classes);
  // Classifier.
  cm.Gemm(true, false, d, c.classes, batch, 1.0f, a.pooled.data(), d, a.dlogits.data(), c.classes,
          0.0f, head_w_->grad.data(), c.classes);
  cm.ColumnSum(a.dlogits.data(), batch, c.classes, c.classes, 1.0f, 0.0f, head_b_->grad.data());
  cm.Gemm(false, true, batch, d, c.classes, 1.0f, a.dlogits.data(), c.classes,
          head_w_->value.data(), c.classes, 0.0f, a.dpooled.data(), d);
  // Mean pooling: every token of image b receives dpooled[b] / tokens.
  cm.Scale(1.0f / tokens, a.dpooled.data(), static_cast<size_t>(batch) * d);
  cm.Fill(a.dtmp.data(), 0.0f, n);
  for (int32_t b = 0; b < batch; ++b) {
    cm.AddRowVector(a.dtmp.data() + static_cast<size_t>(b) * tokens * d, tokens, d, d,
                    a.dpooled.data() + static_cast<size_t>(b) * d);
  }
  cm.LayerNormBackward(a.h[c.layers].data(), final_gamma_->value.data(), a.final_mean.data(),
                       a.final_rstd.data(), a.dtmp.data(), rows, d, a.dh.data(),
                       final_gamma_->grad.data(), final_beta_->grad.data());

  for (int32_t l = c.layers - 1; l >= 0; --l) {
    // h_{l+1} = m_l + Mlp(LN2(m_l)): dh becomes the gradient w.r.t. m_l.
    BALLAST_RETURN_IF_ERROR(mlp_[l]->Backward(a.dh.data(), a.dblock.data()));
    cm.LayerNormBackward(a.mid[l].data(), ln2_gamma_[l]->value.data(), a.ln2_mean[l].data(),
                         a.ln2_rstd[l].data(), a.dblock.data(), rows, d, a.dtmp.data(),
                         ln2_gamma_[l]->grad.data(), ln2_beta_[l]->grad.data());
    cm.Axpy(1.0f, a.dtmp.data(), a.dh.data(), n);
    // m_l = h_l + Attention(LN1(h_l)): dh becomes the gradient w.r.t. h_l.
    BALLAST_RETURN_IF_ERROR(attention_[l]->Backward(a.dh.data(), a.dblock.data()));
    cm.LayerNormBackward(a.h[l].data(), ln1_gamma_[l]->value.data(), a.ln1_mean[l].data(),
                         a.ln1_rstd[l].data(), a.dblock.data(), rows, d, a.dtmp.data(),
                         ln1_gamma_[l]->grad.data(), ln1_beta_[l]->grad.data());
    cm.Axpy(1.0f, a.dtmp.data(), a.dh.data(), n);
  }
  // Patch and position embeddings. The position gradient sums over images: a column sum
  // of dh viewed as batch rows of tokens * hidden.
  cm.Gemm(true, false, pp, d, rows, 1.0f, a.patches.data(), pp, a.dh.data(), d, 0.0f,
          patch_w_->grad.data(), d);
  cm.ColumnSum(a.dh.data(), rows, d, d, 1.0f, 0.0f, patch_b_->grad.data());
  cm.ColumnSum(a.dh.data(), batch, tokens * d, tokens * d, 1.0f, 0.0f, pos_->grad.data());
  return absl::OkStatus();
}

absl::Status Vit::ApplyAdamW(const AdamWOptions& adamw) {
  for (ParallelBlock* b : blocks()) BALLAST_RETURN_IF_ERROR(b->AdamWStep(adamw));
  ++replicated_step_;
  AdamWOptions no_decay = adamw;
  no_decay.weight_decay = 0.0f;
  for (const auto& p : params_) {
    compute().AdamW(p->decay ? adamw : no_decay, replicated_step_, p->value.data(),
                    p->grad.data(), p->m.data(), p->v.data(), p->size);
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchResult> Vit::TrainBatch(const uint8_t* pixels, const uint8_t* labels,
                                            int32_t batch, const AdamWOptions& adamw) {
  BALLAST_ASSIGN_OR_RETURN(BatchResult result, Forward(pixels, labels, batch, true));
  BALLAST_RETURN_IF_ERROR(Backward(batch));
  BALLAST_RETURN_IF_ERROR(ApplyAdamW(adamw));
  return result;
}

absl::StatusOr<BatchResult> Vit::EvalBatch(const uint8_t* pixels, const uint8_t* labels,
                                           int32_t batch) {
  return Forward(pixels, labels, batch, false);
}

absl::Status Vit::SaveCheckpoint(const std::string& path, int64_t step) {
  Compute& cm = compute();
  Writer w;
  w.Put(kMagic);
  for (int32_t v : {config_.image_size, config_.patch_size, config_.hidden, config_.heads,
                    config_.layers, config_.mlp_ratio, config_.mlp_unit_size, config_.classes}) {
    w.Put(v);
  }
  w.Put(step);
  w.Put(replicated_step_);
  for (const auto& p : params_) {
    for (Buffer* b : {&p->value, &p->m, &p->v}) {
      std::vector<float> host(p->size);
      cm.CopyToHost(b->data(), host.data(), p->size);
      w.PutVector(host);
    }
  }
  for (ParallelBlock* b : blocks()) {
    BALLAST_ASSIGN_OR_RETURN(BlockCheckpoint ckpt, b->SaveCheckpoint());
    w.PutVector(ckpt.value);
    w.PutVector(ckpt.adam_m);
    w.PutVector(ckpt.adam_v);
    w.PutVector(ckpt.unit_steps);
    w.Put(ckpt.bias_step);
  }
  BALLAST_RETURN_IF_ERROR(cm.Synchronize());
  if (group_->rank().value() != 0) return absl::OkStatus();
  return WriteFileAtomically(path, w.bytes());
}

absl::StatusOr<int64_t> Vit::LoadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open checkpoint"));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Reader r(std::move(bytes), path);
  char magic[sizeof(kMagic)];
  for (char& ch : magic) {
    BALLAST_ASSIGN_OR_RETURN(ch, r.Get<char>("magic"));
  }
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a ViT checkpoint (bad magic)"));
  }
  const std::pair<const char*, int32_t> shape[] = {
      {"image_size", config_.image_size}, {"patch_size", config_.patch_size},
      {"hidden", config_.hidden},         {"heads", config_.heads},
      {"layers", config_.layers},         {"mlp_ratio", config_.mlp_ratio},
      {"mlp_unit_size", config_.mlp_unit_size}, {"classes", config_.classes}};
  for (const auto& [name, want] : shape) {
    BALLAST_ASSIGN_OR_RETURN(int32_t got, r.Get<int32_t>(name));
    if (got != want) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": saved with ", name, "=", got,
                                                     ", this model has ", name, "=", want));
    }
  }
  BALLAST_ASSIGN_OR_RETURN(int64_t step, r.Get<int64_t>("step"));
  BALLAST_ASSIGN_OR_RETURN(int64_t replicated_step, r.Get<int64_t>("replicated_step"));
  // Parse everything before changing anything, so a bad file leaves the model as it was.
  std::vector<std::vector<float>> replicated;
  for (const auto& p : params_) {
    for (int k = 0; k < 3; ++k) {
      BALLAST_ASSIGN_OR_RETURN(std::vector<float> v, r.GetVector<float>(p->name.c_str(), p->size));
      replicated.push_back(std::move(v));
    }
  }
  std::vector<BlockCheckpoint> block_ckpts;
  for (ParallelBlock* b : blocks()) {
    const size_t dense = b->dense_size();
    BlockCheckpoint ckpt;
    BALLAST_ASSIGN_OR_RETURN(ckpt.value, r.GetVector<float>("block value", dense));
    BALLAST_ASSIGN_OR_RETURN(ckpt.adam_m, r.GetVector<float>("block adam_m", dense));
    BALLAST_ASSIGN_OR_RETURN(ckpt.adam_v, r.GetVector<float>("block adam_v", dense));
    BALLAST_ASSIGN_OR_RETURN(ckpt.unit_steps,
                             r.GetVector<int64_t>("block unit_steps", b->num_units()));
    BALLAST_ASSIGN_OR_RETURN(ckpt.bias_step, r.Get<int64_t>("block bias_step"));
    block_ckpts.push_back(std::move(ckpt));
  }
  if (!r.done()) return absl::DataLossError(absl::StrCat(path, ": trailing bytes"));
  if (step < 0 || replicated_step < 0) {
    return absl::DataLossError(absl::StrCat(path, ": negative step counters"));
  }

  std::vector<ParallelBlock*> bs = blocks();
  for (size_t i = 0; i < bs.size(); ++i) {
    BALLAST_RETURN_IF_ERROR(bs[i]->RestoreCheckpoint(block_ckpts[i]));
  }
  Compute& cm = compute();
  size_t k = 0;
  for (const auto& p : params_) {
    for (Buffer* b : {&p->value, &p->m, &p->v}) {
      cm.CopyFromHost(replicated[k++].data(), b->data(), p->size);
    }
  }
  replicated_step_ = replicated_step;
  BALLAST_RETURN_IF_ERROR(cm.Synchronize());
  return step;
}

}  // namespace ballast::vit
