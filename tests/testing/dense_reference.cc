// The dense reference and its driver (dense_reference.h says what they do). Past ~600
// lines on purpose: the reference trainer and the driver that replays a run against it
// share the private fate, snapshot and AdamW helpers below, and both must change together
// whenever the block math does; apart, the helpers would need a header of their own that
// only these two halves include.
#include "testing/dense_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "testing/rank_processes.h"
#include "testing/run_record_wire.h"

namespace ballast::testing {
namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

double Gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }

double GeluGrad(double x) {
  const double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

absl::Status Annotate(const absl::Status& status, size_t step, const char* what) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("step ", step, " ", what, ": ", status.message()));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Numbers.

std::vector<float> RandomNormal(size_t n, uint32_t seed, double stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(dist(rng));
  return out;
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

double MaxRelError(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double max_want = 0;
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    // NaN compares false with everything, so test it explicitly.
    if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
    max_diff = std::max(max_diff, diff);
    max_want = std::max(max_want, std::abs(want[i]));
  }
  return max_diff / std::max(max_want, 1e-12);
}

// ---------------------------------------------------------------------------------------
// The dense blocks.
//
// MLP dense layout: w1 (H x I), b1 (I), w2 (I x H), b2 (H).
// Attention dense layout, with D = heads * head_dim: wq, wk, wv (H x D each), bq, bk, bv
// (D each), wo (D x H), bo (H).

DenseBlock::DenseBlock(Kind kind, int32_t hidden, int32_t num_units, int32_t unit_width)
    : kind_(kind), hidden_(hidden), num_units_(num_units), unit_width_(unit_width) {}

DenseBlock DenseBlock::Mlp(int32_t hidden, int32_t intermediate, int32_t unit_size) {
  return DenseBlock(Kind::kMlp, hidden, intermediate / unit_size, unit_size);
}

DenseBlock DenseBlock::Attention(int32_t hidden, int32_t num_heads, int32_t head_dim) {
  return DenseBlock(Kind::kAttention, hidden, num_heads, head_dim);
}

size_t DenseBlock::dense_size() const {
  const size_t h = hidden_;
  const size_t d = static_cast<size_t>(num_units_) * unit_width_;  // I, or heads * head_dim
  if (kind_ == Kind::kMlp) return h * d + d + d * h + h;
  return 3 * h * d + 3 * d + d * h + h;
}

size_t DenseBlock::OutputWeightOffset() const {
  const size_t h = hidden_;
  const size_t d = static_cast<size_t>(num_units_) * unit_width_;
  if (kind_ == Kind::kMlp) return h * d + d;
  return 3 * h * d + 3 * d;
}

size_t DenseBlock::BiasOffset() const {
  return OutputWeightOffset() + static_cast<size_t>(num_units_) * unit_width_ * hidden_;
}

std::vector<int32_t> DenseBlock::UnitOfElement() const {
  const size_t h = hidden_;
  const size_t w = unit_width_;
  const size_t d = static_cast<size_t>(num_units_) * w;
  std::vector<int32_t> unit(dense_size(), -1);
  size_t pos = 0;
  // Input-side weights: hidden x d, column c belongs to unit c / w.
  const int input_mats = kind_ == Kind::kMlp ? 1 : 3;
  for (int m = 0; m < input_mats; ++m) {
    for (size_t i = 0; i < h; ++i) {
      for (size_t c = 0; c < d; ++c) unit[pos++] = static_cast<int32_t>(c / w);
    }
  }
  // Input-side biases: d each.
  for (int m = 0; m < input_mats; ++m) {
    for (size_t c = 0; c < d; ++c) unit[pos++] = static_cast<int32_t>(c / w);
  }
  // Output weights: d x hidden, row c belongs to unit c / w.
  for (size_t c = 0; c < d; ++c) {
    for (size_t o = 0; o < h; ++o) unit[pos++] = static_cast<int32_t>(c / w);
  }
  // The rest (the replicated output bias) stays -1.
  return unit;
}

std::vector<bool> DenseBlock::ElementsOfUnits(const std::vector<bool>& units) const {
  const std::vector<int32_t> unit_of = UnitOfElement();
  std::vector<bool> out(unit_of.size(), false);
  for (size_t i = 0; i < unit_of.size(); ++i) {
    out[i] = unit_of[i] >= 0 && static_cast<size_t>(unit_of[i]) < units.size() && units[unit_of[i]];
  }
  return out;
}

void DenseBlock::MlpUnitPass(const std::vector<double>& params, const std::vector<double>& x,
                             const std::vector<double>* dy, int32_t tokens, int32_t unit,
                             std::vector<double>* y, std::vector<double>* dx,
                             std::vector<double>* grad, std::vector<double>* mean) const {
  const size_t h = hidden_;
  const size_t inter = static_cast<size_t>(num_units_) * unit_width_;
  const size_t w1 = 0;
  const size_t b1 = h * inter;
  const size_t w2 = b1 + inter;
  const size_t first = static_cast<size_t>(unit) * unit_width_;
  if (mean != nullptr) mean->assign(unit_width_, 0.0);
  for (size_t j = first; j < first + unit_width_; ++j) {
    // One neuron at a time: pre, act and their gradients are per token.
    std::vector<double> pre(tokens), act(tokens);
    for (int32_t t = 0; t < tokens; ++t) {
      double s = params[b1 + j];
      for (size_t i = 0; i < h; ++i) s += x[t * h + i] * params[w1 + i * inter + j];
      pre[t] = s;
      act[t] = Gelu(s);
      if (y != nullptr) {
        for (size_t o = 0; o < h; ++o) (*y)[t * h + o] += act[t] * params[w2 + j * h + o];
      }
      if (mean != nullptr) (*mean)[j - first] += act[t] / tokens;
    }
    if (dy == nullptr) continue;
    for (int32_t t = 0; t < tokens; ++t) {
      double dact = 0;
      for (size_t o = 0; o < h; ++o) {
        dact += (*dy)[t * h + o] * params[w2 + j * h + o];
        (*grad)[w2 + j * h + o] += act[t] * (*dy)[t * h + o];
      }
      const double dpre = dact * GeluGrad(pre[t]);
      (*grad)[b1 + j] += dpre;
      for (size_t i = 0; i < h; ++i) {
        (*grad)[w1 + i * inter + j] += x[t * h + i] * dpre;
        (*dx)[t * h + i] += dpre * params[w1 + i * inter + j];
      }
    }
  }
}

void DenseBlock::AttentionUnitPass(const std::vector<double>& params, const std::vector<double>& x,
                                   const std::vector<double>* dy, int32_t batch, int32_t seq,
                                   int32_t unit, std::vector<double>* y, std::vector<double>* dx,
                                   std::vector<double>* grad, std::vector<double>* mean) const {
  const size_t h = hidden_;
  const size_t hd = unit_width_;
  const size_t d = static_cast<size_t>(num_units_) * hd;
  // Offsets of wq, wk, wv (index 0..2) and bq, bk, bv.
  const size_t w_off[3] = {0, h * d, 2 * h * d};
  const size_t b_off[3] = {3 * h * d, 3 * h * d + d, 3 * h * d + 2 * d};
  const size_t wo = OutputWeightOffset();
  const size_t first = static_cast<size_t>(unit) * hd;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const size_t s = seq;
  const int32_t tokens = batch * seq;
  if (mean != nullptr) mean->assign(hd, 0.0);

  for (int32_t b = 0; b < batch; ++b) {
    const size_t row0 = static_cast<size_t>(b) * s;
    // proj[m][i * hd + c]: Q, K, V of this head for token i of the sample.
    std::vector<std::vector<double>> proj(3, std::vector<double>(s * hd));
    for (int m = 0; m < 3; ++m) {
      for (size_t i = 0; i < s; ++i) {
        for (size_t c = 0; c < hd; ++c) {
          double acc = params[b_off[m] + first + c];
          for (size_t k = 0; k < h; ++k) {
            acc += x[(row0 + i) * h + k] * params[w_off[m] + k * d + first + c];
          }
          proj[m][i * hd + c] = acc;
        }
      }
    }
    const std::vector<double>& q = proj[0];
    const std::vector<double>& kk = proj[1];
    const std::vector<double>& v = proj[2];
    // p[i * s + j] = softmax_j(q_i . k_j * scale).
    std::vector<double> p(s * s);
    for (size_t i = 0; i < s; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < s; ++j) {
        double dot = 0;
        for (size_t c = 0; c < hd; ++c) dot += q[i * hd + c] * kk[j * hd + c];
        p[i * s + j] = dot * scale;
        mx = std::max(mx, p[i * s + j]);
      }
      double sum = 0;
      for (size_t j = 0; j < s; ++j) {
        p[i * s + j] = std::exp(p[i * s + j] - mx);
        sum += p[i * s + j];
      }
      for (size_t j = 0; j < s; ++j) p[i * s + j] /= sum;
    }
    std::vector<double> ctx(s * hd, 0.0);
    for (size_t i = 0; i < s; ++i) {
      for (size_t j = 0; j < s; ++j) {
        for (size_t c = 0; c < hd; ++c) ctx[i * hd + c] += p[i * s + j] * v[j * hd + c];
      }
    }
    for (size_t i = 0; i < s; ++i) {
      for (size_t c = 0; c < hd; ++c) {
        if (mean != nullptr) (*mean)[c] += ctx[i * hd + c] / tokens;
        if (y == nullptr) continue;
        for (size_t o = 0; o < h; ++o) {
          (*y)[(row0 + i) * h + o] += ctx[i * hd + c] * params[wo + (first + c) * h + o];
        }
      }
    }
    if (dy == nullptr) continue;

    // Backward through the output projection.
    std::vector<double> dctx(s * hd, 0.0);
    for (size_t i = 0; i < s; ++i) {
      for (size_t c = 0; c < hd; ++c) {
        for (size_t o = 0; o < h; ++o) {
          const double g = (*dy)[(row0 + i) * h + o];
          dctx[i * hd + c] += g * params[wo + (first + c) * h + o];
          (*grad)[wo + (first + c) * h + o] += ctx[i * hd + c] * g;
        }
      }
    }
    // Through P V and the softmax.
    std::vector<std::vector<double>> dproj(3, std::vector<double>(s * hd, 0.0));
    std::vector<double> dp(s * s, 0.0);
    for (size_t i = 0; i < s; ++i) {
      for (size_t j = 0; j < s; ++j) {
        for (size_t c = 0; c < hd; ++c) {
          dp[i * s + j] += dctx[i * hd + c] * v[j * hd + c];
          dproj[2][j * hd + c] += p[i * s + j] * dctx[i * hd + c];
        }
      }
    }
    for (size_t i = 0; i < s; ++i) {
      double dot = 0;
      for (size_t j = 0; j < s; ++j) dot += p[i * s + j] * dp[i * s + j];
      for (size_t j = 0; j < s; ++j) {
        const double dscore = p[i * s + j] * (dp[i * s + j] - dot) * scale;
        for (size_t c = 0; c < hd; ++c) {
          dproj[0][i * hd + c] += dscore * kk[j * hd + c];
          dproj[1][j * hd + c] += dscore * q[i * hd + c];
        }
      }
    }
    // Through the Q, K, V projections.
    for (int m = 0; m < 3; ++m) {
      for (size_t i = 0; i < s; ++i) {
        for (size_t c = 0; c < hd; ++c) {
          const double g = dproj[m][i * hd + c];
          (*grad)[b_off[m] + first + c] += g;
          for (size_t k = 0; k < h; ++k) {
            (*grad)[w_off[m] + k * d + first + c] += x[(row0 + i) * h + k] * g;
            (*dx)[(row0 + i) * h + k] += g * params[w_off[m] + k * d + first + c];
          }
        }
      }
    }
  }
}

void DenseBlock::UnitPass(const std::vector<double>& params, const std::vector<double>& x,
                          const std::vector<double>* dy, int32_t batch, int32_t seq, int32_t unit,
                          std::vector<double>* y, std::vector<double>* dx,
                          std::vector<double>* grad, std::vector<double>* mean) const {
  if (kind_ == Kind::kMlp) {
    MlpUnitPass(params, x, dy, batch * seq, unit, y, dx, grad, mean);
  } else {
    AttentionUnitPass(params, x, dy, batch, seq, unit, y, dx, grad, mean);
  }
}

DenseResult DenseBlock::Run(const std::vector<double>& params, const std::vector<double>& x,
                            const std::vector<double>& dy, int32_t batch, int32_t seq,
                            const UnitTreatment& treatment) const {
  const size_t h = hidden_;
  const size_t tokens = static_cast<size_t>(batch) * seq;
  DenseResult result;
  result.y.assign(tokens * h, 0.0);
  result.dx.assign(tokens * h, 0.0);
  result.grad.assign(dense_size(), 0.0);
  result.batch_mean.assign(num_units_, {});
  const size_t bias = BiasOffset();
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t o = 0; o < h; ++o) {
      result.y[t * h + o] += params[bias + o];
      result.grad[bias + o] += dy[t * h + o];
    }
  }
  for (int32_t u = 0; u < num_units_; ++u) {
    const bool pruned = static_cast<size_t>(u) < treatment.pruned.size() && treatment.pruned[u];
    if (!pruned) {
      UnitPass(params, x, &dy, batch, seq, u, &result.y, &result.dx, &result.grad,
               &result.batch_mean[u]);
      continue;
    }
    // The imputation is a constant: it adds to y and nothing to any gradient.
    if (static_cast<size_t>(u) < treatment.imputed_mean.size() &&
        !treatment.imputed_mean[u].empty()) {
      const std::vector<double> row = ImputedRow(params, u, treatment.imputed_mean[u]);
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t o = 0; o < h; ++o) result.y[t * h + o] += row[o];
      }
    }
  }
  return result;
}

std::vector<double> DenseBlock::UnitContribution(const std::vector<double>& params,
                                                 const std::vector<double>& x, int32_t batch,
                                                 int32_t seq, int32_t unit) const {
  std::vector<double> y(static_cast<size_t>(batch) * seq * hidden_, 0.0);
  UnitPass(params, x, /*dy=*/nullptr, batch, seq, unit, &y, nullptr, nullptr, nullptr);
  return y;
}

std::vector<double> DenseBlock::ImputedRow(const std::vector<double>& params, int32_t unit,
                                           const std::vector<double>& mean) const {
  const size_t h = hidden_;
  const size_t wo = OutputWeightOffset();
  std::vector<double> row(h, 0.0);
  for (int32_t c = 0; c < unit_width_ && static_cast<size_t>(c) < mean.size(); ++c) {
    const size_t in_row = static_cast<size_t>(unit) * unit_width_ + c;
    for (size_t o = 0; o < h; ++o) row[o] += mean[c] * params[wo + in_row * h + o];
  }
  return row;
}

MlpParams DenseBlock::ToMlpParams(const std::vector<float>& dense) const {
  const size_t h = hidden_;
  const size_t inter = static_cast<size_t>(num_units_) * unit_width_;
  auto it = dense.begin();
  MlpParams p;
  p.w1.assign(it, it + h * inter);
  it += h * inter;
  p.b1.assign(it, it + inter);
  it += inter;
  p.w2.assign(it, it + inter * h);
  it += inter * h;
  p.b2.assign(it, it + h);
  return p;
}

AttentionParams DenseBlock::ToAttentionParams(const std::vector<float>& dense) const {
  const size_t h = hidden_;
  const size_t d = static_cast<size_t>(num_units_) * unit_width_;
  auto it = dense.begin();
  auto take = [&it](size_t n) {
    std::vector<float> out(it, it + n);
    it += n;
    return out;
  };
  AttentionParams p;
  p.wq = take(h * d);
  p.wk = take(h * d);
  p.wv = take(h * d);
  p.bq = take(d);
  p.bk = take(d);
  p.bv = take(d);
  p.wo = take(d * h);
  p.bo = take(h);
  return p;
}

// ---------------------------------------------------------------------------------------
// AdamW and the trainer.

DenseAdamWState StartAdamW(std::vector<double> w) {
  DenseAdamWState state;
  const size_t n = w.size();
  state.w = std::move(w);
  state.m.assign(n, 0.0);
  state.v.assign(n, 0.0);
  state.steps.assign(n, 0);
  return state;
}

void DenseAdamWStep(const AdamWOptions& options, const std::vector<double>& grad,
                    const std::vector<bool>& frozen, DenseAdamWState* state) {
  const double lr = options.lr;
  const double b1 = options.beta1;
  const double b2 = options.beta2;
  const double eps = options.eps;
  const double wd = options.weight_decay;
  for (size_t i = 0; i < state->w.size(); ++i) {
    if (i < frozen.size() && frozen[i]) continue;
    const double g = grad[i];
    const int64_t t = ++state->steps[i];
    state->m[i] = b1 * state->m[i] + (1 - b1) * g;
    state->v[i] = b2 * state->v[i] + (1 - b2) * g * g;
    const double mhat = state->m[i] / (1 - std::pow(b1, static_cast<double>(t)));
    const double vhat = state->v[i] / (1 - std::pow(b2, static_cast<double>(t)));
    state->w[i] -= lr * (wd * state->w[i] + mhat / (std::sqrt(vhat) + eps));
  }
}

ReferenceTrainer::ReferenceTrainer(DenseBlock block, std::vector<double> params,
                                   const AdamWOptions& adamw, double mean_decay)
    : block_(std::move(block)),
      adamw_(adamw),
      mean_decay_(mean_decay),
      state_(StartAdamW(std::move(params))),
      means_(block_.num_units()) {}

DenseResult ReferenceTrainer::Step(const std::vector<double>& x, const std::vector<double>& dy,
                                   int32_t batch, int32_t seq, const std::vector<UnitFate>& fates,
                                   Imputation imputation) {
  const int32_t n = block_.num_units();
  auto fate = [&fates](int32_t u) {
    return static_cast<size_t>(u) < fates.size() ? fates[u] : UnitFate::kLocal;
  };
  UnitTreatment treatment;
  treatment.pruned.assign(n, false);
  treatment.imputed_mean.assign(n, {});
  for (int32_t u = 0; u < n; ++u) {
    if (fate(u) != UnitFate::kPruned) continue;
    treatment.pruned[u] = true;
    // A unit never computed has no mean yet; it imputes nothing (scripts avoid this).
    if (imputation == Imputation::kMean) treatment.imputed_mean[u] = means_[u];
  }
  DenseResult result = block_.Run(state_.w, x, dy, batch, seq, treatment);
  for (int32_t u = 0; u < n; ++u) {
    if (fate(u) != UnitFate::kLocal) continue;
    const std::vector<double>& batch_mean = result.batch_mean[u];
    if (means_[u].empty()) {
      means_[u] = batch_mean;
      continue;
    }
    for (size_t c = 0; c < batch_mean.size(); ++c) {
      means_[u][c] = mean_decay_ * means_[u][c] + (1 - mean_decay_) * batch_mean[c];
    }
  }
  DenseAdamWStep(adamw_, result.grad, block_.ElementsOfUnits(treatment.pruned), &state_);
  return result;
}

// ---------------------------------------------------------------------------------------
// The driver.

std::vector<ScriptStep> RandomSteps(const DenseBlock& block, int32_t batch, int32_t seq, int count,
                                    uint32_t seed) {
  const size_t n = static_cast<size_t>(batch) * seq * block.hidden();
  std::vector<ScriptStep> steps(count);
  for (int i = 0; i < count; ++i) {
    steps[i].x = RandomNormal(n, seed * 1000 + 2 * i, 1.0);
    steps[i].dy = RandomNormal(n, seed * 1000 + 2 * i + 1, 1.0);
  }
  return steps;
}

int32_t StepBatch(const Script& script, size_t step) {
  return script.steps[step].batch > 0 ? script.steps[step].batch : script.batch;
}

int32_t StepSeq(const Script& script, size_t step) {
  return script.steps[step].seq > 0 ? script.steps[step].seq : script.seq;
}

const WorkloadPlan* PlanInForce(const Script& script, size_t step) {
  const WorkloadPlan* plan = nullptr;
  for (size_t s = 0; s <= step && s < script.steps.size(); ++s) {
    if (script.steps[s].plan.has_value()) plan = &*script.steps[s].plan;
  }
  return plan;
}

namespace {

absl::StatusOr<StateSnapshot> Snapshot(ParallelBlock& block) {
  StateSnapshot snap;
  BALLAST_ASSIGN_OR_RETURN(snap.value, block.GatherDense(ParamField::kValue));
  BALLAST_ASSIGN_OR_RETURN(snap.adam_m, block.GatherDense(ParamField::kAdamM));
  BALLAST_ASSIGN_OR_RETURN(snap.adam_v, block.GatherDense(ParamField::kAdamV));
  return snap;
}

absl::Status RunRank(const Script& script, const BlockFactory& make_block, RankContext& ctx,
                     RunRecord* record) {
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, make_block(ctx));
  Compute& compute = ctx.backend->compute();
  BALLAST_ASSIGN_OR_RETURN(record->initial[ctx.rank], Snapshot(*block));

  for (size_t s = 0; s < script.steps.size(); ++s) {
    const ScriptStep& step = script.steps[s];
    const int32_t batch = StepBatch(script, s);
    const int32_t seq = StepSeq(script, s);
    const size_t n = static_cast<size_t>(batch) * seq * block->hidden();
    if (step.x.size() != n || step.dy.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("script step ", s, ": x / dy size"));
    }
    BALLAST_ASSIGN_OR_RETURN(Buffer x, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer y, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dy, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dx, compute.Allocate(n));
    // Each rank writes only its own, preallocated slot: no lock needed.
    RankStep& out = record->steps[s][ctx.rank];
    if (step.before_step) step.before_step(ctx, *block);
    if (step.plan.has_value()) {
      BALLAST_RETURN_IF_ERROR(Annotate(ctx.group->OfferPlan(*step.plan), s, "OfferPlan"));
    }
    BALLAST_RETURN_IF_ERROR(Annotate(ctx.group->BeginStep(), s, "BeginStep"));
    out.applied_version = ctx.group->applied_version();
    out.owner_of_unit = block->owner_of_unit();
    out.units = block->LocalUnits();
    out.fates = block->LocalFates();

    compute.CopyFromHost(step.x.data(), x.data(), n);
    compute.CopyFromHost(step.dy.data(), dy.data(), n);
    BALLAST_RETURN_IF_ERROR(Annotate(block->Forward(x.data(), batch, seq, y.data()), s, "Forward"));
    BALLAST_RETURN_IF_ERROR(Annotate(block->Backward(dy.data(), dx.data()), s, "Backward"));
    out.y = ToHost(compute, y.data(), n);
    out.dx = ToHost(compute, dx.data(), n);
    BALLAST_RETURN_IF_ERROR(Annotate(compute.Synchronize(), s, "Synchronize"));
    absl::StatusOr<std::vector<float>> grad = block->GatherDense(ParamField::kGrad);
    BALLAST_RETURN_IF_ERROR(Annotate(grad.status(), s, "GatherDense(kGrad)"));
    out.grad = *std::move(grad);
    BALLAST_RETURN_IF_ERROR(Annotate(block->AdamWStep(script.adamw), s, "AdamWStep"));
    BALLAST_RETURN_IF_ERROR(Annotate(ctx.group->EndStep(), s, "EndStep"));

    absl::StatusOr<StateSnapshot> after = Snapshot(*block);
    BALLAST_RETURN_IF_ERROR(Annotate(after.status(), s, "GatherDense(state)"));
    out.after = *std::move(after);
    for (int32_t unit : block->LocalUnits()) {
      absl::StatusOr<std::vector<float>> mean = block->UnitMean(unit);
      if (mean.ok()) out.unit_means[unit] = *std::move(mean);
    }
  }
  return absl::OkStatus();
}

// Checks the fates reported by every rank against ownership and the plan; returns the
// fate of every unit, or nullopt (after ADD_FAILURE) when the reports are inconsistent.
std::optional<std::vector<UnitFate>> MergeFates(const Script& script, const BlockPlan* plan,
                                                const std::vector<RankId>& owner,
                                                const std::vector<RankStep>& ranks,
                                                int32_t num_units) {
  std::vector<std::optional<UnitFate>> fate(num_units);
  bool consistent = true;
  for (int32_t r = 0; r < script.ranks; ++r) {
    const RankStep& rs = ranks[r];
    EXPECT_EQ(rs.units.size(), rs.fates.size()) << "rank " << r;
    int32_t pruned = 0;
    int32_t offloaded = 0;
    for (size_t i = 0; i < rs.units.size() && i < rs.fates.size(); ++i) {
      const int32_t u = rs.units[i];
      if (u < 0 || u >= num_units || fate[u].has_value() || owner[u] != RankId(r)) {
        ADD_FAILURE() << "rank " << r << " reports unit " << u
                      << " which is out of range, reported twice or not its own";
        consistent = false;
        continue;
      }
      fate[u] = rs.fates[i];
      pruned += rs.fates[i] == UnitFate::kPruned;
      offloaded += rs.fates[i] == UnitFate::kOffloaded;
    }
    int32_t want_pruned = 0;
    int32_t want_offloaded = 0;
    if (plan != nullptr) {
      if (static_cast<size_t>(r) < plan->pruned_units.size()) want_pruned = plan->pruned_units[r];
      for (const Offload& o : plan->offloads) {
        if (o.owner == RankId(r)) want_offloaded += o.units;
      }
    }
    EXPECT_EQ(pruned, want_pruned) << "pruned units of rank " << r;
    EXPECT_EQ(offloaded, want_offloaded) << "offloaded units of rank " << r;
  }
  std::vector<UnitFate> merged(num_units, UnitFate::kLocal);
  for (int32_t u = 0; u < num_units; ++u) {
    if (!fate[u].has_value()) {
      ADD_FAILURE() << "no rank reports unit " << u;
      consistent = false;
      continue;
    }
    merged[u] = *fate[u];
  }
  if (!consistent) return std::nullopt;
  return merged;
}

// True where `a` and `b` hold the same bits (so -0 != +0 and a NaN equals itself).
bool BitwiseEqual(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Elements whose bits differ; -1 when the sizes differ.
int CountBitwiseDifferences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += !BitwiseEqual(a[i], b[i]);
  return count;
}

void ExpectFieldMatches(const char* field, const std::vector<float>& got,
                        const std::vector<float>& before, const std::vector<double>& want,
                        const std::vector<bool>& frozen, double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << field;
  std::vector<bool> live(frozen.size());
  for (size_t i = 0; i < frozen.size(); ++i) live[i] = !frozen[i];
  EXPECT_LE(MaxRelError(Select(got, live), Select(want, live)), tolerance) << field;
  if (before.size() != got.size()) {
    ADD_FAILURE() << field << ": no snapshot before the step to compare pruned units with";
    return;
  }
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (frozen[i] && !BitwiseEqual(got[i], before[i])) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0) << field << " of pruned units changed in " << mismatches
                           << " elements (they must stay bitwise unchanged)";
}

}  // namespace

absl::StatusOr<RunRecord> RunScript(const Script& script, const BlockFactory& make_block) {
  RunRecord record;
  record.initial.resize(script.ranks);
  record.steps.assign(script.steps.size(), std::vector<RankStep>(script.ranks));
  if (script.processes) {
    for (const ScriptStep& step : script.steps) {
      if (step.before_step) {
        return absl::InvalidArgumentError(
            "script.processes: a before_step hook's gtest EXPECTs cannot report from a forked "
            "rank");
      }
    }
    std::vector<std::string> outputs;
    BALLAST_RETURN_IF_ERROR(RunRankProcesses(
        script.ranks,
        [&](RankContext& ctx, std::string* out) -> absl::Status {
          // The child's copy of the record: only its own rank's slots are filled.
          BALLAST_RETURN_IF_ERROR(RunRank(script, make_block, ctx, &record));
          *out = EncodeRankRecord(record, ctx.rank);
          return absl::OkStatus();
        },
        RankProcessesOptions{.ranks = {.backend = script.backend}}, &outputs));
    for (int32_t r = 0; r < script.ranks; ++r) {
      BALLAST_RETURN_IF_ERROR(DecodeRankRecord(outputs[r], r, &record));
    }
    return record;
  }
  BALLAST_RETURN_IF_ERROR(RunRanks(
      script.ranks,
      [&](RankContext& ctx) -> absl::Status { return RunRank(script, make_block, ctx, &record); },
      RunRanksOptions{.backend = script.backend}));
  return record;
}

void ExpectRunMatchesReference(const DenseBlock& block, const std::vector<float>& initial_params,
                               const Script& script, const RunRecord& record, double tolerance) {
  ASSERT_EQ(record.steps.size(), script.steps.size());
  ASSERT_EQ(record.initial.size(), static_cast<size_t>(script.ranks));
  const int32_t num_units = block.num_units();
  const std::vector<double> zeros(block.dense_size(), 0.0);
  ASSERT_EQ(script.owner_of_unit.size(), static_cast<size_t>(num_units))
      << "the script must state the initial ownership";
  for (int32_t r = 0; r < script.ranks; ++r) {
    SCOPED_TRACE(absl::StrCat("initial state, rank ", r));
    // LoadDense then GatherDense is a pure copy, so demand the exact bits back.
    EXPECT_EQ(CountBitwiseDifferences(record.initial[r].value, initial_params), 0)
        << "GatherDense(kValue) after LoadDense";
    EXPECT_EQ(MaxRelError(record.initial[r].adam_m, zeros), 0.0);
    EXPECT_EQ(MaxRelError(record.initial[r].adam_v, zeros), 0.0);
  }

  ReferenceTrainer ref(block, ToDouble(initial_params), script.adamw, script.mean_decay);
  std::vector<RankId> owner = script.owner_of_unit;
  // Units that changed owner: whether their running mean travels with them is not
  // specified, so their means are not compared once they have moved.
  std::vector<bool> moved(num_units, false);
  for (size_t s = 0; s < script.steps.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("step ", s));
    const WorkloadPlan* plan = PlanInForce(script, s);
    const BlockPlan* block_plan = nullptr;
    if (plan != nullptr) {
      for (const BlockPlan& bp : plan->blocks) {
        if (bp.block == script.block) block_plan = &bp;
      }
    }
    // Ownership changes only through a plan's owner_of_unit, and then stays.
    if (script.steps[s].plan.has_value() && block_plan != nullptr &&
        !block_plan->owner_of_unit.empty()) {
      owner = block_plan->owner_of_unit;
    }
    ASSERT_EQ(owner.size(), static_cast<size_t>(num_units));
    for (int32_t u = 0; u < num_units; ++u) {
      moved[u] = moved[u] || owner[u] != script.owner_of_unit[u];
    }

    const std::vector<RankStep>& ranks = record.steps[s];
    const PlanVersion want_version = plan != nullptr ? plan->version : PlanVersion(0);
    for (int32_t r = 0; r < script.ranks; ++r) {
      EXPECT_EQ(ranks[r].applied_version, want_version) << "rank " << r;
      EXPECT_EQ(ranks[r].owner_of_unit, owner) << "rank " << r;
    }
    std::optional<std::vector<UnitFate>> fates =
        MergeFates(script, block_plan, owner, ranks, num_units);
    ASSERT_TRUE(fates.has_value());
    std::vector<bool> pruned_units(num_units, false);
    std::vector<std::string> pruned_names;
    for (int32_t u = 0; u < num_units; ++u) {
      pruned_units[u] = (*fates)[u] == UnitFate::kPruned;
      if ((*fates)[u] != UnitFate::kLocal) {
        pruned_names.push_back(absl::StrCat(u, ":", UnitFateName((*fates)[u])));
      }
    }
    SCOPED_TRACE(absl::StrCat("non-local units {", absl::StrJoin(pruned_names, ", "), "}"));
    const std::vector<bool> frozen = block.ElementsOfUnits(pruned_units);

    const Imputation imputation = plan != nullptr ? plan->imputation : Imputation::kZero;
    const DenseResult want = ref.Step(ToDouble(script.steps[s].x), ToDouble(script.steps[s].dy),
                                      StepBatch(script, s), StepSeq(script, s), *fates, imputation);
    for (int32_t r = 0; r < script.ranks; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      const RankStep& got = ranks[r];
      EXPECT_LE(MaxRelError(got.y, want.y), tolerance) << "y";
      EXPECT_LE(MaxRelError(got.dx, want.dx), tolerance) << "dx";
      EXPECT_LE(MaxRelError(got.grad, want.grad), tolerance) << "grad";
      // Pruned units get no gradient at all, not merely a small one.
      const std::vector<float> pruned_grad = Select(got.grad, frozen);
      EXPECT_EQ(MaxRelError(pruned_grad, std::vector<double>(pruned_grad.size(), 0.0)), 0.0)
          << "gradient of pruned units";

      const StateSnapshot& before = s == 0 ? record.initial[r] : record.steps[s - 1][r].after;
      ExpectFieldMatches("value", got.after.value, before.value, ref.state().w, frozen, tolerance);
      ExpectFieldMatches("adam_m", got.after.adam_m, before.adam_m, ref.state().m, frozen,
                         tolerance);
      ExpectFieldMatches("adam_v", got.after.adam_v, before.adam_v, ref.state().v, frozen,
                         tolerance);

      for (int32_t u = 0; u < num_units; ++u) {
        if (owner[u] != RankId(r) || moved[u] || ref.unit_mean(u).empty()) continue;
        auto it = got.unit_means.find(u);
        if (it == got.unit_means.end()) {
          ADD_FAILURE() << "UnitMean(" << u << ") failed on its owner, rank " << r;
          continue;
        }
        EXPECT_LE(MaxRelError(it->second, ref.unit_mean(u)), tolerance)
            << "running mean of unit " << u;
      }
    }
  }
}

}  // namespace ballast::testing
