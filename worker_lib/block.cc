// ParallelBlock's machinery (see block.h). One file past the usual ~600 lines on purpose:
// step layout, weight and gradient transfers, micro-batch accumulation, reshard, priority
// windows, AdamW and checkpoints all work on the private Storage and StepLayout below, and
// splitting them would put those structs in a header for every file to reach into.
#include "ballast/block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ballast/tp_group.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ballast {
namespace {

// Per sharded parameter, these fields are stored, each `unit_elems` floats per unit.
enum FieldKind { kValue = 0, kGrad = 1, kMoment1 = 2, kMoment2 = 3, kSnapshot = 4 };
constexpr int kFieldsPerParam = 5;
// A block times its forward's offload transfers as a link sample (BlockTiming::received)
// once in this many steps, behind a barrier (OffloadExchange): an all-reduce of 8 bytes.
// Blocks take turns (step + block id), so a step has at most a barrier or two. Under a CPU
// quota each barrier costs the throttled rank a wake-up: sampling every block's every
// exchange on every 4th step made those steps 25% slower (0.225 s against 0.179 s).
constexpr int64_t kLinkSampleEvery = 16;

// Host-side per-unit state; it moves with the unit when storage is reordered or resharded.
struct UnitMeta {
  int64_t unit = 0;
  int64_t adam_step = 0;     // AdamW steps this unit has taken (pruned steps do not count)
  int64_t mean_obs = 0;      // steps that contributed to its running mean
  double score = 0;          // keep priority: higher is pruned later
  int64_t last_pruned = -1;  // step it was last pruned; -1 = never
  int64_t active_steps = 0;  // steps it received a gradient in the current window
};
// UnitMeta travels inside float messages during a reshard.
constexpr size_t kMetaFloats = sizeof(UnitMeta) / sizeof(float);
static_assert(sizeof(UnitMeta) % sizeof(float) == 0);

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser: a cheap, well-spread hash
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Completes "<call> without a Backward ...": when gradients were last consumed.
absl::string_view NoGradientsSince(const UnitConfig& config) {
  return config.keep_gradients ? "since DiscardGradients" : "in this step (or since AdamWStep)";
}

}  // namespace

struct ParallelBlock::Storage {
  // fields[p * kFieldsPerParam + kind] for sharded parameter p; then one field for the
  // running mean activations.
  std::vector<Buffer> fields;
  std::vector<size_t> elems;   // per field, floats per unit
  std::vector<UnitMeta> meta;  // storage order
  // The replicated parameters (the output bias, then the subclass's replicated extra) and
  // their gradient and moments: replicated_size() floats each.
  Buffer bias, bias_grad, bias_m, bias_v;
  int64_t bias_step = 0;

  int32_t units() const { return static_cast<int32_t>(meta.size()); }
  float* slab(size_t field, int32_t pos) { return fields[field].data() + pos * elems[field]; }
};

// A unit being placed into rebuilt storage: where each field's slab comes from, and its meta.
struct ParallelBlock::SlabRef {
  std::vector<const float*> fields;
  UnitMeta meta;
};

// What this rank computes for one owner, as its helper, this step: offloaded units, or
// a slice of one unit's work (a replica, BlockPlan::replicas).
struct ParallelBlock::StepLayoutIn {
  int32_t owner;
  int32_t units;
  bool replica = false;
  std::pair<double, double> span{0.0, 1.0};  // a replica's slice of its unit's work
  // The units' ids, in the owner's storage order (when the subclass asks for them: the
  // owner sends them with the weights), and their receive buffer.
  std::vector<int32_t> unit_ids;
  Buffer ids;
  std::vector<Buffer> params;  // one per sharded parameter
  std::vector<Buffer> grads;
  std::vector<Buffer> cache;
};

// How this step's plan maps onto storage order (see block.h).
struct ParallelBlock::StepLayout {
  struct Out {
    int32_t helper;
    int32_t first;
    int32_t units;
  };
  using In = StepLayoutIn;
  // The plan in force (null = all local) and its imputation.
  std::optional<BlockPlan> plan;
  Imputation imputation = Imputation::kZero;

  int32_t local = 0;
  std::vector<Out> out;
  // This rank's units split with helpers (BlockPlan::replicas), in plan order: the
  // unit's storage position, the helper, and per sharded parameter a buffer for the
  // helper's gradients, which are added to the owner's.
  struct ReplicaOut {
    int32_t pos;
    int32_t helper;
    std::vector<Buffer> grads;
  };
  std::vector<ReplicaOut> replicas_out;
  // Per local storage position, the slice of its work computed here (empty: all whole).
  std::vector<std::pair<double, double>> local_spans;
  // Per out[i], the offloaded units' ids as floats, sent to the helper with the weights
  // when the subclass reads them (ReadsUnitIds).
  std::vector<Buffer> out_ids;
  int32_t pruned_first = 0;
  std::vector<In> in;

  std::vector<Buffer> local_cache;
  // Per offload (out[i]) and sharded parameter: receives the helper's gradients when the
  // owner accumulates (a step's second and later micro-batches; with keep_gradients, any
  // Backward while gradients are pending), which are then added to the owner's (a first
  // Backward's land in place). Kept across steps, sized for the step's offloads.
  std::vector<std::vector<Buffer>> grad_recv;
  Buffer local_means;
  Buffer imputed;
  const float* x = nullptr;  // the forward input, saved for backward (caller keeps it)
  int32_t batch = 0;
  int32_t seq = 0;
  bool forward_done = false;     // a Forward ran this step (units were computed)
  bool forward_pending = false;  // the latest Forward awaits its Backward
  bool weights_sent = false;     // helpers hold this step's weights of offloaded units
  // The step's offload receives: from whom (-1: none yet, -2: several peers), how much.
  int32_t received_from = -1;
  int64_t received_bytes = 0;
  // Backwards accumulated into the gradients since they were last consumed: by
  // DiscardGradients (or a load), and without keep_gradients also by AdamWStep and
  // BeginStep. The next Backward adds to the gradients while it is > 0.
  int32_t backwards = 0;
  // Backwards run this step, whatever AdamWStep reset: each returned the offloaded units'
  // gradients (BlockTiming::micro_batches).
  int32_t step_backwards = 0;
  // This step's token loads, counted by the subclass (CountForwardUnitTokens,
  // CountTokensComputed): BlockTiming::unit_tokens and tokens_computed at EndStep.
  std::vector<int32_t> unit_tokens;
  int64_t tokens_computed = 0;
  int64_t step = -1;
};

absl::string_view UnitFateName(UnitFate fate) {
  switch (fate) {
    case UnitFate::kLocal:
      return "local";
    case UnitFate::kOffloaded:
      return "offloaded";
    case UnitFate::kPruned:
      return "pruned";
  }
  return "unknown";
}

ParallelBlock::ParallelBlock(TpGroup* group, BlockId id, int32_t num_units, int32_t hidden,
                             std::vector<ShardedParamSpec> sharded, size_t mean_unit_elems,
                             UnitConfig config, size_t replicated_extra)
    : group_(group),
      id_(id),
      num_units_(num_units),
      hidden_(hidden),
      replicated_size_(hidden + replicated_extra),
      sharded_(std::move(sharded)),
      mean_unit_elems_(mean_unit_elems),
      config_(std::move(config)),
      storage_(std::make_unique<Storage>()),
      layout_(std::make_unique<StepLayout>()) {
  timing_.block = id_;
}

ParallelBlock::~ParallelBlock() {
  if (registered_) group_->Unregister(this);
}

Compute& ParallelBlock::compute() { return group_->backend().compute(); }

const float* ParallelBlock::replicated() const { return storage_->bias.data(); }

float* ParallelBlock::replicated_grad() { return storage_->bias_grad.data(); }

absl::Status ParallelBlock::TimedAllReduceSum(float* data, size_t n) {
  compute_timer_->Stop();  // hooks run inside the compute timer
  comm_timer_->Start();
  absl::Status status = group_->backend().comm().AllReduceSum(data, n);
  comm_timer_->Stop();
  compute_timer_->Start();
  return status;
}

absl::Status ParallelBlock::Init() {
  const int32_t size = group_->size();
  if (config_.priority_window <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": priority_window ",
                                                   config_.priority_window, " must be > 0"));
  }
  if (config_.mean_interval <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": mean_interval ",
                                                   config_.mean_interval, " must be > 0"));
  }
  if (!(config_.mean_decay >= 0.0f && config_.mean_decay < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": mean_decay ",
                                                   config_.mean_decay, " must be in [0, 1)"));
  }
  if (config_.owner_of_unit.empty()) {
    owner_of_unit_ = EvenOwnership(num_units_, size);
  } else {
    if (static_cast<int32_t>(config_.owner_of_unit.size()) != num_units_) {
      return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": owner_of_unit has ",
                                                     config_.owner_of_unit.size(),
                                                     " entries, block has ", num_units_, " units"));
    }
    for (size_t u = 0; u < config_.owner_of_unit.size(); ++u) {
      const int32_t r = config_.owner_of_unit[u].value();
      if (r < 0 || r >= size) {
        return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": owner_of_unit[", u,
                                                       "] = ", r, " out of range [0, ", size, ")"));
      }
    }
    owner_of_unit_ = config_.owner_of_unit;
  }
  // Slowed where the group emulates a slower device: compute only, never collectives.
  compute_timer_ = group_->ComputeTimer();
  comm_timer_ = compute().NewTimer();
  receive_timer_ = compute().NewTimer();

  Storage& st = *storage_;
  for (const ShardedParamSpec& spec : sharded_) {
    for (int k = 0; k < kFieldsPerParam; ++k) st.elems.push_back(spec.unit_elems);
  }
  st.elems.push_back(mean_unit_elems_);
  st.fields.resize(st.elems.size());
  const int32_t me = group_->rank().value();
  for (int32_t u = 0; u < num_units_; ++u) {
    if (owner_of_unit_[u].value() == me) st.meta.push_back(UnitMeta{.unit = u});
  }
  for (size_t f = 0; f < st.fields.size(); ++f) {
    BALLAST_ASSIGN_OR_RETURN(st.fields[f], compute().Allocate(st.units() * st.elems[f]));
  }
  for (Buffer* b : {&st.bias, &st.bias_grad, &st.bias_m, &st.bias_v}) {
    BALLAST_ASSIGN_OR_RETURN(*b, compute().Allocate(replicated_size_));
  }
  // A block made after a plan named the job's priority ranks by it, as its peers do (its
  // initial scores, set by the load below, depend on the policy).
  if (group_->applied_plan().priority.has_value()) {
    config_.priority = *group_->applied_plan().priority;
  }
  std::vector<float> dense(DenseSize());
  InitDense(dense);
  BALLAST_RETURN_IF_ERROR(LoadDenseVector(dense));
  BALLAST_RETURN_IF_ERROR(group_->Register(this));
  registered_ = true;
  return absl::OkStatus();
}

absl::Status ParallelBlock::LoadDenseVector(const std::vector<float>& dense) {
  if (dense.size() != DenseSize()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(),
                                                   ": dense parameters have ", dense.size(),
                                                   " floats, expected ", DenseSize()));
  }
  ScatterDense(kValue, dense, storage_->bias);
  return ResetState();
}

void ParallelBlock::ScatterDense(int field_kind, const std::vector<float>& dense, Buffer& bias) {
  Storage& st = *storage_;
  std::vector<std::vector<float>> host(sharded_.size());
  std::vector<float*> slabs(sharded_.size());
  for (size_t p = 0; p < sharded_.size(); ++p) {
    host[p].resize(sharded_[p].unit_elems);
    slabs[p] = host[p].data();
  }
  for (int32_t pos = 0; pos < st.units(); ++pos) {
    DenseToUnit(static_cast<int32_t>(st.meta[pos].unit), dense.data(), slabs, nullptr);
    for (size_t p = 0; p < sharded_.size(); ++p) {
      compute().CopyFromHost(host[p].data(), st.slab(p * kFieldsPerParam + field_kind, pos),
                             sharded_[p].unit_elems);
    }
  }
  std::vector<float> bias_host(replicated_size_);
  DenseToUnit(-1, dense.data(), slabs, bias_host.data());
  compute().CopyFromHost(bias_host.data(), bias.data(), replicated_size_);
}

absl::Status ParallelBlock::ResetState() {
  Storage& st = *storage_;
  for (size_t p = 0; p < sharded_.size(); ++p) {
    const size_t n = st.units() * sharded_[p].unit_elems;
    for (int k : {kGrad, kMoment1, kMoment2}) {
      compute().Fill(st.fields[p * kFieldsPerParam + k].data(), 0.0f, n);
    }
    compute().Copy(st.fields[p * kFieldsPerParam + kValue].data(),
                   st.fields[p * kFieldsPerParam + kSnapshot].data(), n);
  }
  compute().Fill(st.fields.back().data(), 0.0f, st.units() * mean_unit_elems_);
  for (Buffer* b : {&st.bias_grad, &st.bias_m, &st.bias_v}) {
    compute().Fill(b->data(), 0.0f, replicated_size_);
  }
  st.bias_step = 0;
  // Never-measured units rank first under kChange, so units pruned before their first
  // measurement rotate back in once the others have a (finite) score.
  const double initial =
      config_.priority == Priority::kChange ? std::numeric_limits<double>::infinity() : 0.0;
  for (UnitMeta& m : st.meta) m = UnitMeta{.unit = m.unit, .score = initial};
  layout_->backwards = 0;  // the gradients were zeroed above: none is pending
  return compute().Synchronize();
}

size_t ParallelBlock::unit_bytes() const {
  size_t floats = 0;
  for (const ShardedParamSpec& spec : sharded_) floats += spec.unit_elems;
  return floats * sizeof(float);
}

std::vector<int32_t> ParallelBlock::LocalUnits() const {
  std::vector<int32_t> units;
  for (const UnitMeta& m : storage_->meta) units.push_back(static_cast<int32_t>(m.unit));
  return units;
}

std::vector<UnitFate> ParallelBlock::LocalFates() const {
  std::vector<UnitFate> fates(storage_->units(), UnitFate::kPruned);
  const StepLayout& l = *layout_;
  for (int32_t i = 0; i < l.local && i < storage_->units(); ++i) fates[i] = UnitFate::kLocal;
  for (const auto& o : l.out) {
    for (int32_t i = o.first; i < o.first + o.units; ++i) fates[i] = UnitFate::kOffloaded;
  }
  return fates;
}

absl::StatusOr<std::vector<float>> ParallelBlock::UnitMean(int32_t unit) const {
  const Storage& st = *storage_;
  for (int32_t pos = 0; pos < st.units(); ++pos) {
    if (st.meta[pos].unit == unit) {
      std::vector<float> mean(mean_unit_elems_);
      group_->backend().compute().CopyToHost(st.fields.back().data() + pos * mean_unit_elems_,
                                             mean.data(), mean_unit_elems_);
      return mean;
    }
  }
  return absl::NotFoundError(absl::StrCat("block ", id_.value(), ": unit ", unit,
                                          " is not owned by rank ", group_->rank().value()));
}

BlockShape ParallelBlock::Shape() const {
  return BlockShape{.block = id_,
                    .num_units = num_units_,
                    .owner_of_unit = owner_of_unit_,
                    .units_divide = UnitsDivide()};
}

absl::Status ParallelBlock::ApplyPlan(const BlockPlan* plan, Imputation imputation,
                                      std::optional<Priority> priority) {
  if (plan != nullptr && !plan->owner_of_unit.empty() && plan->owner_of_unit != owner_of_unit_) {
    comm_timer_->Start();
    absl::Status status = Reshard(plan->owner_of_unit);
    comm_timer_->Stop();
    BALLAST_RETURN_IF_ERROR(status);
  }
  layout_->plan = plan ? std::optional<BlockPlan>(*plan) : std::nullopt;
  layout_->imputation = imputation;
  // Read only when the window rolls (RollWindow), so the storage order, and with it which
  // units this window's plans prune, stays as it was ranked until then. The order is the
  // rank's own: peers and helpers need not switch at the same step.
  if (priority.has_value()) config_.priority = *priority;
  return absl::OkStatus();
}

absl::Status ParallelBlock::BeginStep(int64_t step) {
  compute_timer_->Reset();
  comm_timer_->Reset();
  receive_timer_->Reset();
  if (step > 0 && step % config_.priority_window == 0) BALLAST_RETURN_IF_ERROR(RollWindow(step));

  // Resolve the plan into contiguous storage ranges (see block.h for the layout).
  StepLayout& l = *layout_;
  const int32_t me = group_->rank().value();
  const int32_t owned = storage_->units();
  int32_t pruned = 0;
  l.out.clear();
  l.local_spans.clear();
  std::vector<StepLayout::In> in;
  // Receive buffers for `units` of `owner`'s units: last step's while the plan keeps them.
  auto receive = [&](int32_t owner, int32_t units) -> absl::StatusOr<StepLayout::In> {
    auto same = std::find_if(l.in.begin(), l.in.end(), [&](const StepLayoutIn& old) {
      return old.owner == owner && old.units == units && !old.params.empty();
    });
    if (same != l.in.end()) {
      StepLayout::In entry = std::move(*same);
      same->params.clear();
      entry.replica = false;
      entry.span = {0.0, 1.0};
      return entry;
    }
    StepLayout::In entry;
    entry.owner = owner;
    entry.units = units;
    for (const ShardedParamSpec& spec : sharded_) {
      BALLAST_ASSIGN_OR_RETURN(entry.params.emplace_back(),
                               compute().Allocate(units * spec.unit_elems));
      BALLAST_ASSIGN_OR_RETURN(entry.grads.emplace_back(),
                               compute().Allocate(units * spec.unit_elems));
    }
    return entry;
  };
  std::vector<StepLayout::ReplicaOut> replicas_out;
  if (l.plan.has_value()) {
    if (!l.plan->pruned_units.empty()) pruned = l.plan->pruned_units[me];
    for (const Offload& o : l.plan->offloads) {
      if (o.owner.value() == me) l.out.push_back({o.helper.value(), 0, o.units});
      if (o.helper.value() == me) {
        BALLAST_ASSIGN_OR_RETURN(in.emplace_back(), receive(o.owner.value(), o.units));
      }
    }
    // Replicas after the offloads, in plan order, on both sides of every pair (Exchange
    // matches one pair's messages in order). A unit's slices: the owner's [0, 1 - sum of
    // its shares), then each replica's in plan order; every rank computes the same
    // boundaries, so the slices tile the unit's work exactly.
    std::map<int32_t, double> first;  // unit -> where its next replica's slice begins
    for (const Replica& r : l.plan->replicas) first[r.unit] -= r.share;
    for (auto& [unit, at] : first) at += 1.0;
    std::map<int32_t, int32_t> remaining;
    for (const Replica& r : l.plan->replicas) ++remaining[r.unit];
    for (const Replica& r : l.plan->replicas) {
      const double begin = first[r.unit];
      const double end = --remaining[r.unit] == 0 ? 1.0 : begin + r.share;
      first[r.unit] = end;
      const int32_t owner = owner_of_unit_[r.unit].value();
      if (owner == me) {
        int32_t pos = 0;
        while (storage_->meta[pos].unit != r.unit) ++pos;
        if (l.local_spans.empty()) l.local_spans.assign(owned, {0.0, 1.0});
        l.local_spans[pos].second = std::min(l.local_spans[pos].second, begin);
        StepLayout::ReplicaOut out{.pos = pos, .helper = r.helper.value(), .grads = {}};
        if (static_cast<size_t>(replicas_out.size()) < l.replicas_out.size()) {
          out.grads = std::move(l.replicas_out[replicas_out.size()].grads);  // reuse
        }
        replicas_out.push_back(std::move(out));
      }
      if (r.helper.value() == me) {
        BALLAST_ASSIGN_OR_RETURN(StepLayout::In entry, receive(owner, 1));
        entry.replica = true;
        entry.unit_ids = {r.unit};
        entry.span = {begin, end};
        in.push_back(std::move(entry));
      }
    }
  }
  l.replicas_out = std::move(replicas_out);
  int32_t offloaded = 0;
  for (const auto& o : l.out) offloaded += o.units;
  l.local = owned - pruned - offloaded;
  int32_t next = l.local;
  for (auto& o : l.out) {
    o.first = next;
    next += o.units;
  }
  l.pruned_first = next;
  l.in = std::move(in);
  for (int32_t pos = l.pruned_first; pos < owned; ++pos) storage_->meta[pos].last_pruned = step;
  l.forward_done = false;
  l.forward_pending = false;
  l.weights_sent = false;
  l.received_from = -1;
  l.received_bytes = 0;
  // Torch's contract keeps pending gradients across the boundary: units moved by the
  // reshard or the window roll above carried theirs with them (Rebuild moves every field).
  if (!config_.keep_gradients) l.backwards = 0;
  l.step_backwards = 0;
  l.unit_tokens.clear();
  l.tokens_computed = 0;
  l.step = step;
  return absl::OkStatus();
}

absl::Status ParallelBlock::EndStep() {
  BALLAST_ASSIGN_OR_RETURN(timing_.compute_seconds, compute_timer_->Seconds());
  BALLAST_ASSIGN_OR_RETURN(timing_.comm_seconds, comm_timer_->Seconds());
  // Whole units: a replica's slice of a unit is not one (a unit whose work divides is
  // measured by its work, not counted).
  int32_t units = layout_->local;
  for (const auto& in : layout_->in) units += in.replica ? 0 : in.units;
  timing_.units_computed = layout_->forward_done ? units : 0;
  timing_.seconds_per_unit =
      timing_.units_computed > 0 ? timing_.compute_seconds / timing_.units_computed : 0.0;
  timing_.micro_batches = layout_->step_backwards;
  timing_.unit_tokens = layout_->unit_tokens;
  timing_.tokens_computed = layout_->tokens_computed;
  timing_.received_from = -1;
  timing_.received_bytes = 0;
  timing_.received_seconds = 0;
  if (layout_->received_from >= 0 && layout_->received_bytes > 0) {
    BALLAST_ASSIGN_OR_RETURN(const double seconds, receive_timer_->Seconds());
    if (std::isfinite(seconds) && seconds > 0) {  // a coarse timer can read 0: no sample
      timing_.received_from = layout_->received_from;
      timing_.received_bytes = layout_->received_bytes;
      timing_.received_seconds = seconds;
    }
  }
  return absl::OkStatus();
}

absl::Status ParallelBlock::OffloadExchange(const std::vector<PeerTransfer>& sends,
                                            const std::vector<PeerTransfer>& recvs,
                                            bool owners_send) {
  StepLayout& l = *layout_;
  // A plan with no offloads or replicas moves nothing on any rank, and every rank runs the
  // same plan in the step: all skip alike, so Gloo's exchange tags stay in step. Nothing is
  // timed either: on CUDA that is four timer events a step fewer under an empty plan (the
  // plan machinery's overhead, docs/benchmarks.md).
  if (!l.plan.has_value() || (l.plan->offloads.empty() && l.plan->replicas.empty())) {
    return absl::OkStatus();
  }
  Communicator& comm = group_->backend().comm();
  // On its turn the block times the forward's receives (the weights) as a link sample,
  // after a barrier: without it a receiver's timer also runs while a late sender still
  // computes (the link looks slow), or starts after an early sender's bytes already wait
  // in its socket (the link looks fast; measured 2x on a shaped link). Every rank takes
  // the same branch: they run the same plan in the same step.
  const bool sample = owners_send && (l.step + id_.value()) % kLinkSampleEvery == 0;
  comm_timer_->Start();
  absl::Status status;
  if (sample) {
    int64_t token = 0;
    status = comm.AllReduceMin(&token, 1);
  }
  int64_t bytes = 0;
  for (const PeerTransfer& r : recvs) {
    if (!sample || r.count == 0) continue;
    bytes += static_cast<int64_t>(r.count * sizeof(float));
    // A sender feeding several ranks at once shares its uplink between them: such a
    // transfer measures a share of the link, not the link.
    int32_t sender_flows = 0;
    for (const Offload& o : l.plan->offloads) sender_flows += o.owner.value() == r.peer;
    for (const Replica& p : l.plan->replicas) {
      sender_flows += owner_of_unit_[p.unit].value() == r.peer;
    }
    if (l.received_from == -1) l.received_from = r.peer;
    if (l.received_from != r.peer || sender_flows > 1) l.received_from = -2;
  }
  l.received_bytes += bytes;
  if (status.ok()) {
    if (bytes > 0) receive_timer_->Start();
    status = comm.Exchange(sends, recvs);
    if (bytes > 0) receive_timer_->Stop();
  }
  comm_timer_->Stop();
  return status;
}

ParallelBlock::UnitRange ParallelBlock::StorageRange(int32_t first, int32_t count,
                                                     std::vector<Buffer>* cache, float* mean_out) {
  UnitRange range;
  range.units = count;
  range.cache = cache;
  range.mean_out = mean_out;
  for (int32_t pos = first; pos < first + count; ++pos) {
    if (ReadsUnitIds()) range.unit_ids.push_back(static_cast<int32_t>(storage_->meta[pos].unit));
    if (!layout_->local_spans.empty()) range.spans.push_back(layout_->local_spans[pos]);
  }
  for (size_t p = 0; p < sharded_.size(); ++p) {
    range.params.push_back(storage_->slab(p * kFieldsPerParam + kValue, first));
    range.grads.push_back(storage_->slab(p * kFieldsPerParam + kGrad, first));
  }
  return range;
}

ParallelBlock::UnitRange ParallelBlock::HelperRange(size_t index) {
  StepLayoutIn& in = layout_->in[index];
  UnitRange range;
  range.units = in.units;
  range.unit_ids = in.unit_ids;
  if (in.replica) range.spans = {in.span};
  range.cache = RangeCache(static_cast<int>(index));
  for (auto& b : in.params) range.params.push_back(b.data());
  for (auto& b : in.grads) range.grads.push_back(b.data());
  return range;
}

void ParallelBlock::CountForwardUnitTokens(absl::Span<const int32_t> tokens_per_unit) {
  layout_->unit_tokens.insert(layout_->unit_tokens.end(), tokens_per_unit.begin(),
                              tokens_per_unit.end());
}

void ParallelBlock::CountTokensComputed(int64_t tokens) { layout_->tokens_computed += tokens; }

double ParallelBlock::capacity_factor() const {
  return layout_->plan.has_value() ? layout_->plan->capacity_factor : 0.0;
}

absl::Status ParallelBlock::EnsureSize(Buffer& buffer, size_t n) {
  if (buffer.size() != n) {
    BALLAST_ASSIGN_OR_RETURN(buffer, compute().Allocate(n));
  }
  return absl::OkStatus();
}

absl::Status ParallelBlock::EnsureCache(std::vector<Buffer>& cache, int32_t units, int32_t batch,
                                        int32_t seq, bool at_least) {
  const std::vector<size_t> sizes = CacheSizes(units, batch, seq);
  if (cache.size() < sizes.size() || !at_least) cache.resize(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (at_least && cache[i].size() >= sizes[i]) continue;
    BALLAST_RETURN_IF_ERROR(EnsureSize(cache[i], sizes[i]));
  }
  return absl::OkStatus();
}

std::vector<Buffer>* ParallelBlock::RangeCache(int index) {
  if (config_.recompute) return &group_->recompute_cache_;
  return index < 0 ? &layout_->local_cache : &layout_->in[index].cache;
}

size_t ParallelBlock::activation_bytes() const {
  if (config_.recompute) return 0;
  size_t floats = 0;
  for (const Buffer& b : layout_->local_cache) floats += b.size();
  for (const auto& in : layout_->in) {
    for (const Buffer& b : in.cache) floats += b.size();
  }
  return floats * sizeof(float);
}

absl::Status ParallelBlock::Forward(const float* x, int32_t batch, int32_t seq, float* y,
                                    bool add_output_bias) {
  StepLayout& l = *layout_;
  if (l.step < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", id_.value(), ": Forward outside a step; call TpGroup::BeginStep"));
  }
  if (x == nullptr || y == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": x or y is null"));
  }
  if (batch <= 0 || seq <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", id_.value(), ": batch ", batch, " and seq ", seq, " must be > 0"));
  }
  BALLAST_RETURN_IF_ERROR(PrepareShape(batch, seq));
  const int32_t tokens = batch * seq;
  Compute& c = compute();
  Communicator& comm = group_->backend().comm();

  if (config_.recompute) {  // one shared set of buffers, big enough for the largest range
    int32_t widest = l.local;
    for (const auto& in : l.in) widest = std::max(widest, in.units);
    BALLAST_RETURN_IF_ERROR(EnsureCache(*RangeCache(-1), widest, batch, seq, true));
  } else {
    BALLAST_RETURN_IF_ERROR(EnsureCache(l.local_cache, l.local, batch, seq));
    for (auto& in : l.in) BALLAST_RETURN_IF_ERROR(EnsureCache(in.cache, in.units, batch, seq));
  }
  BALLAST_RETURN_IF_ERROR(EnsureSize(l.local_means, l.local * mean_unit_elems_));
  BALLAST_RETURN_IF_ERROR(EnsureSize(l.imputed, hidden_));
  l.batch = batch;
  l.seq = seq;

  // Owners ship the offloaded units' weights to their helpers (every rank takes part),
  // once per step: later micro-batches reuse them.
  absl::Status status;
  if (!l.weights_sent) {
    const bool ids = ReadsUnitIds();
    std::vector<PeerTransfer> sends, recvs;
    if (ids) l.out_ids.resize(l.out.size());
    for (size_t i = 0; i < l.out.size(); ++i) {
      const auto& o = l.out[i];
      for (size_t p = 0; p < sharded_.size(); ++p) {
        sends.push_back({o.helper, storage_->slab(p * kFieldsPerParam + kValue, o.first),
                         o.units * sharded_[p].unit_elems});
      }
      if (ids) {  // exact as floats: unit ids are far below 2^24
        std::vector<float> host(o.units);
        for (int32_t u = 0; u < o.units; ++u) host[u] = storage_->meta[o.first + u].unit;
        BALLAST_RETURN_IF_ERROR(EnsureSize(l.out_ids[i], o.units));
        c.CopyFromHost(host.data(), l.out_ids[i].data(), o.units);
        sends.push_back({o.helper, l.out_ids[i].data(), static_cast<size_t>(o.units)});
      }
    }
    for (const auto& r : l.replicas_out) {
      for (size_t p = 0; p < sharded_.size(); ++p) {
        sends.push_back({r.helper, storage_->slab(p * kFieldsPerParam + kValue, r.pos),
                         sharded_[p].unit_elems});
      }
    }
    for (auto& in : l.in) {
      for (size_t p = 0; p < sharded_.size(); ++p) {
        recvs.push_back({in.owner, in.params[p].data(), in.params[p].size()});
      }
      if (ids && !in.replica) {  // a replica's unit is named by the plan
        BALLAST_RETURN_IF_ERROR(EnsureSize(in.ids, in.units));
        recvs.push_back({in.owner, in.ids.data(), static_cast<size_t>(in.units)});
      }
    }
    BALLAST_RETURN_IF_ERROR(OffloadExchange(sends, recvs, /*owners_send=*/true));
    for (auto& in : l.in) {
      if (!ids || in.replica) continue;
      std::vector<float> host(in.units);
      c.CopyToHost(in.ids.data(), host.data(), in.units);
      in.unit_ids.assign(host.begin(), host.end());
    }
    l.weights_sent = true;
  }

  compute_timer_->Start();
  l.x = x;
  status = BeginForward(x, batch, seq);
  if (!status.ok()) {
    compute_timer_->Stop();
    return status;
  }
  const size_t n = static_cast<size_t>(tokens) * hidden_;
  // The running means are a full pass over the activations: sampled, not every step (and
  // from the step's first micro-batch only).
  const bool sample_means = l.step % config_.mean_interval == 0 && !l.forward_done;
  float beta = 0.0f;  // the first range computed overwrites y
  if (l.local > 0) {
    ForwardRange(
        StorageRange(0, l.local, RangeCache(-1), sample_means ? l.local_means.data() : nullptr), x,
        batch, seq, beta, y);
    beta = 1.0f;
  }
  for (size_t i = 0; i < l.in.size(); ++i) {
    ForwardRange(HelperRange(i), x, batch, seq, beta, y);
    beta = 1.0f;
  }
  if (beta == 0.0f) c.Fill(y, 0.0f, n);
  const int32_t pruned = storage_->units() - l.pruned_first;
  if (l.imputation == Imputation::kMean && pruned > 0) {
    c.Fill(l.imputed.data(), 0.0f, hidden_);
    ImputeRange(StorageRange(l.pruned_first, pruned, nullptr, nullptr),
                storage_->slab(storage_->fields.size() - 1, l.pruned_first), l.imputed.data());
    c.AddRowVector(y, tokens, hidden_, hidden_, l.imputed.data());
  }
  compute_timer_->Stop();

  comm_timer_->Start();
  status = comm.AllReduceSum(y, n);
  comm_timer_->Stop();
  BALLAST_RETURN_IF_ERROR(status);

  compute_timer_->Start();
  if (add_output_bias) c.AddRowVector(y, tokens, hidden_, hidden_, storage_->bias.data());
  if (sample_means) status = UpdateMeans(l.local, l.local_means.data());
  compute_timer_->Stop();
  BALLAST_RETURN_IF_ERROR(status);
  l.forward_done = true;
  l.forward_pending = true;
  return absl::OkStatus();
}

absl::Status ParallelBlock::UpdateMeans(int32_t units, const float* batch_means) {
  // mean <- batch mean on a unit's first observation, else an exponential moving average.
  // Consecutive units with the same rule are updated in one call.
  Storage& st = *storage_;
  const size_t mean_field = st.fields.size() - 1;
  const float rate = 1.0f - config_.mean_decay;
  int32_t run_start = 0;
  for (int32_t pos = 0; pos <= units; ++pos) {
    const bool boundary =
        pos == units ||
        (pos > run_start && (st.meta[pos].mean_obs == 0) != (st.meta[run_start].mean_obs == 0));
    if (!boundary) continue;
    if (pos > run_start) {
      const size_t n = (pos - run_start) * mean_unit_elems_;
      float* mean = st.slab(mean_field, run_start);
      const float* sample = batch_means + run_start * mean_unit_elems_;
      if (st.meta[run_start].mean_obs == 0) {
        compute().Copy(sample, mean, n);
      } else {
        compute().Scale(1.0f - rate, mean, n);
        compute().Axpy(rate, sample, mean, n);
      }
    }
    run_start = pos;
  }
  for (int32_t pos = 0; pos < units; ++pos) ++st.meta[pos].mean_obs;
  return absl::OkStatus();
}

absl::Status ParallelBlock::Backward(const float* dy, float* dx) {
  StepLayout& l = *layout_;
  if (!l.forward_pending) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", id_.value(), ": Backward without a Forward to differentiate (",
                     l.forward_done ? "the step's latest Forward already had its Backward"
                                    : "no Forward in this step",
                     "; each Backward differentiates the latest Forward, once)"));
  }
  if (dy == nullptr || dx == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": dy or dx is null"));
  }
  Compute& c = compute();
  Communicator& comm = group_->backend().comm();
  Storage& st = *storage_;
  const int32_t tokens = l.batch * l.seq;
  const size_t n = static_cast<size_t>(tokens) * hidden_;

  // The first Backward since the gradients were consumed writes them; later ones add.
  const bool accumulate = l.backwards > 0;
  const float grad_beta = accumulate ? 1.0f : 0.0f;
  compute_timer_->Start();
  // Pruned units receive no gradient: zero at a first Backward. Accumulating, a unit
  // pruned now keeps what it holds (with keep_gradients, its pending gradient).
  if (!accumulate) {
    for (size_t p = 0; p < sharded_.size(); ++p) {
      const size_t e = sharded_[p].unit_elems;
      c.Fill(st.slab(p * kFieldsPerParam + kGrad, l.pruned_first), 0.0f,
             (st.units() - l.pruned_first) * e);
    }
  }
  float beta = 0.0f;  // the first range computed overwrites dx
  if (l.local > 0) {
    const UnitRange range = StorageRange(0, l.local, RangeCache(-1), nullptr);
    if (config_.recompute) ForwardRange(range, l.x, l.batch, l.seq, 0.0f, nullptr);
    BackwardRange(range, l.x, dy, l.batch, l.seq, beta, grad_beta, dx);
    beta = 1.0f;
  }
  for (size_t i = 0; i < l.in.size(); ++i) {
    // A helper's gradients are fresh every micro-batch: the owner accumulates them.
    const UnitRange range = HelperRange(i);
    if (config_.recompute) ForwardRange(range, l.x, l.batch, l.seq, 0.0f, nullptr);
    BackwardRange(range, l.x, dy, l.batch, l.seq, beta, 0.0f, dx);
    beta = 1.0f;
  }
  if (beta == 0.0f) c.Fill(dx, 0.0f, n);
  c.ColumnSum(dy, tokens, hidden_, hidden_, 1.0f, grad_beta, st.bias_grad.data());
  absl::Status status = FinishBackward(l.x, dy, dx, grad_beta);
  compute_timer_->Stop();
  BALLAST_RETURN_IF_ERROR(status);

  // Helpers return the offloaded units' weight gradients: straight into the owners'
  // storage on a first Backward, into a receive buffer (sized for this step's offloads)
  // to add when accumulating.
  std::vector<PeerTransfer> sends, recvs;
  for (auto& in : l.in) {
    for (size_t p = 0; p < sharded_.size(); ++p) {
      sends.push_back({in.owner, in.grads[p].data(), in.grads[p].size()});
    }
  }
  if (accumulate && l.grad_recv.size() < l.out.size()) l.grad_recv.resize(l.out.size());
  for (size_t i = 0; i < l.out.size(); ++i) {
    const auto& o = l.out[i];
    if (accumulate) l.grad_recv[i].resize(sharded_.size());
    for (size_t p = 0; p < sharded_.size(); ++p) {
      const size_t count = o.units * sharded_[p].unit_elems;
      float* into = st.slab(p * kFieldsPerParam + kGrad, o.first);
      if (accumulate) {
        BALLAST_RETURN_IF_ERROR(EnsureSize(l.grad_recv[i][p], count));
        into = l.grad_recv[i][p].data();
      }
      recvs.push_back({o.helper, into, count});
    }
  }
  // A replica's gradients always land in a buffer: the owner computed part of the unit
  // too, so they are added to its own.
  for (auto& r : l.replicas_out) {
    r.grads.resize(sharded_.size());
    for (size_t p = 0; p < sharded_.size(); ++p) {
      BALLAST_RETURN_IF_ERROR(EnsureSize(r.grads[p], sharded_[p].unit_elems));
      recvs.push_back({r.helper, r.grads[p].data(), sharded_[p].unit_elems});
    }
  }
  BALLAST_RETURN_IF_ERROR(OffloadExchange(sends, recvs, /*owners_send=*/false));
  comm_timer_->Start();
  status = comm.AllReduceSum(dx, n);
  comm_timer_->Stop();
  BALLAST_RETURN_IF_ERROR(status);
  // Timed only when there is something to add: on CUDA a start and stop are two events,
  // which an empty plan's step does without (docs/benchmarks.md, the plan overhead).
  const bool add = (accumulate && !l.out.empty()) || !l.replicas_out.empty();
  if (add) compute_timer_->Start();
  if (accumulate) {
    for (size_t i = 0; i < l.out.size(); ++i) {
      for (size_t p = 0; p < sharded_.size(); ++p) {
        c.Axpy(1.0f, l.grad_recv[i][p].data(), st.slab(p * kFieldsPerParam + kGrad, l.out[i].first),
               l.out[i].units * sharded_[p].unit_elems);
      }
    }
  }
  for (const auto& r : l.replicas_out) {
    for (size_t p = 0; p < sharded_.size(); ++p) {
      c.Axpy(1.0f, r.grads[p].data(), st.slab(p * kFieldsPerParam + kGrad, r.pos),
             sharded_[p].unit_elems);
    }
  }
  if (add) compute_timer_->Stop();
  l.forward_pending = false;
  ++l.backwards;
  ++l.step_backwards;
  return absl::OkStatus();
}

bool ParallelBlock::has_gradients() const { return layout_->backwards > 0; }

void ParallelBlock::DiscardGradients() { layout_->backwards = 0; }

absl::StatusOr<double> ParallelBlock::GradSquaredNorm() {
  ParallelBlock* self = this;
  return GroupGradSquaredNorm(absl::MakeConstSpan(&self, 1));
}

absl::StatusOr<double> GroupGradSquaredNorm(absl::Span<ParallelBlock* const> blocks) {
  // Every check before the collective, so every rank fails alike or none does.
  for (ParallelBlock* block : blocks) {
    if (block == nullptr) return absl::InvalidArgumentError("GroupGradSquaredNorm: a null block");
    if (block->group_ != blocks.front()->group_) {
      return absl::InvalidArgumentError(
          absl::StrCat("GroupGradSquaredNorm: block ", block->id_.value(), " is of another TP ",
                       "group than block ", blocks.front()->id_.value()));
    }
    if (!block->has_gradients()) {
      return absl::FailedPreconditionError(absl::StrCat("block ", block->id_.value(),
                                                        ": GradSquaredNorm without a Backward ",
                                                        NoGradientsSince(block->config_)));
    }
  }
  if (blocks.empty()) return 0.0;
  ParallelBlock& first = *blocks.front();
  Compute& c = first.compute();
  // One float in backend memory: every block adds its squares there, the all-reduce runs
  // there, and the host reads the total once (on CUDA one host wait for the whole norm,
  // where a copy per gradient tensor used to drain the stream each time).
  BALLAST_ASSIGN_OR_RETURN(Buffer sum, c.Allocate(1));
  for (ParallelBlock* block : blocks) block->AddLocalGradSquaredNorm(sum.data());
  first.comm_timer_->Start();
  absl::Status status = first.group_->backend().comm().AllReduceSum(sum.data(), 1);
  first.comm_timer_->Stop();
  BALLAST_RETURN_IF_ERROR(status);
  float total = 0;
  c.CopyToHost(sum.data(), &total, 1);
  BALLAST_RETURN_IF_ERROR(c.Synchronize());
  return static_cast<double>(total);
}

void ParallelBlock::AddLocalGradSquaredNorm(float* sum) {
  Storage& st = *storage_;
  // Every unit counts: pruned units' gradients are zero (zeroed by the first Backward of
  // the accumulation) or, with keep_gradients, pending from an earlier step. The bias is
  // replicated, so rank 0 alone counts it.
  for (size_t p = 0; p < sharded_.size(); ++p) {
    compute().AddSquaredNorm(st.fields[p * kFieldsPerParam + kGrad].data(),
                             st.units() * sharded_[p].unit_elems, sum);
  }
  if (group_->rank().value() == 0) {
    compute().AddSquaredNorm(st.bias_grad.data(), replicated_size_, sum);
  }
}

absl::Status ParallelBlock::ScaleGradients(float alpha) {
  if (!std::isfinite(alpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", id_.value(), ": gradient scale ", alpha, " is not finite"));
  }
  Storage& st = *storage_;
  for (size_t p = 0; p < sharded_.size(); ++p) {
    compute().Scale(alpha, st.fields[p * kFieldsPerParam + kGrad].data(),
                    st.units() * sharded_[p].unit_elems);
  }
  compute().Scale(alpha, st.bias_grad.data(), replicated_size_);
  return compute().Synchronize();
}

std::vector<float> ParallelBlock::OutputBias() const {
  std::vector<float> bias(hidden_);
  group_->backend().compute().CopyToHost(storage_->bias.data(), bias.data(), hidden_);
  return bias;
}

absl::Status ParallelBlock::AdamWStep(const AdamWOptions& options) {
  StepLayout& l = *layout_;
  if (!has_gradients()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block ", id_.value(), ": AdamWStep without a Backward ", NoGradientsSince(config_)));
  }
  if (!(options.lr >= 0) || !(options.beta1 >= 0 && options.beta1 < 1) ||
      !(options.beta2 >= 0 && options.beta2 < 1) || !(options.eps > 0) ||
      !(options.weight_decay >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", id_.value(), ": AdamW options out of range (lr ", options.lr,
                     ", beta1 ", options.beta1, ", beta2 ", options.beta2, ", eps ", options.eps,
                     ", weight_decay ", options.weight_decay, ")"));
  }
  Compute& c = compute();
  Storage& st = *storage_;
  compute_timer_->Start();
  // Units [0, pruned_first) were computed this step (local, or returned by helpers). Pruned
  // units sit the step out, even holding a gradient pending from an earlier step (with
  // keep_gradients): it stays until DiscardGradients. Units that share a step count are
  // updated in one call per parameter.
  int32_t run_start = 0;
  for (int32_t pos = 0; pos <= l.pruned_first; ++pos) {
    if (pos < l.pruned_first && st.meta[pos].adam_step == st.meta[run_start].adam_step) continue;
    if (pos > run_start) {
      const int64_t step = st.meta[run_start].adam_step + 1;
      for (size_t p = 0; p < sharded_.size(); ++p) {
        const size_t base = p * kFieldsPerParam;
        c.AdamW(options, step, st.slab(base + kValue, run_start), st.slab(base + kGrad, run_start),
                st.slab(base + kMoment1, run_start), st.slab(base + kMoment2, run_start),
                (pos - run_start) * sharded_[p].unit_elems);
      }
    }
    run_start = pos;
  }
  for (int32_t pos = 0; pos < l.pruned_first; ++pos) {
    ++st.meta[pos].adam_step;
    ++st.meta[pos].active_steps;
  }
  c.AdamW(options, ++st.bias_step, st.bias.data(), st.bias_grad.data(), st.bias_m.data(),
          st.bias_v.data(), replicated_size_);
  compute_timer_->Stop();
  // The gradients are consumed, unless torch's contract keeps them until zero_grad. Either
  // way helpers need the new weights for any further Forward.
  if (!config_.keep_gradients) l.backwards = 0;
  l.weights_sent = false;
  return absl::OkStatus();
}

absl::Status ParallelBlock::RollWindow(int64_t step) {
  Storage& st = *storage_;
  const int32_t n = st.units();
  if (n == 0) return absl::OkStatus();
  std::vector<double> l1(n, 0.0);
  if (config_.priority == Priority::kChange || config_.priority == Priority::kMagnitude) {
    std::vector<double> part(n);
    for (size_t p = 0; p < sharded_.size(); ++p) {
      const size_t base = p * kFieldsPerParam;
      const float* snapshot =
          config_.priority == Priority::kChange ? st.fields[base + kSnapshot].data() : nullptr;
      BALLAST_RETURN_IF_ERROR(compute().UnitL1(st.fields[base + kValue].data(), snapshot, n,
                                               sharded_[p].unit_elems, part.data()));
      for (int32_t i = 0; i < n; ++i) l1[i] += part[i];
    }
  }
  const uint64_t window = static_cast<uint64_t>(step / config_.priority_window);
  for (int32_t i = 0; i < n; ++i) {
    UnitMeta& m = st.meta[i];
    switch (config_.priority) {
      case Priority::kChange:
        // Change per step it was trained; units pruned all window keep their last score.
        if (m.active_steps > 0) m.score = l1[i] / m.active_steps;
        break;
      case Priority::kMagnitude:
        m.score = l1[i];
        break;
      case Priority::kRandom:
        m.score = static_cast<double>(
            Mix(config_.seed ^ Mix(window ^ Mix(static_cast<uint64_t>(id_.value()) ^
                                                Mix(static_cast<uint64_t>(m.unit))))) >>
            11);
        break;
      case Priority::kRoundRobin:
        m.score = static_cast<double>(m.last_pruned);
        break;
    }
    m.active_steps = 0;
  }
  // Reorder storage by priority, highest first, ties by unit id: done once per window so
  // every step's pruned units are a contiguous suffix.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (st.meta[a].score != st.meta[b].score) return st.meta[a].score > st.meta[b].score;
    return st.meta[a].unit < st.meta[b].unit;
  });
  std::vector<SlabRef> refs;
  refs.reserve(n);
  for (int32_t pos : order) {
    SlabRef ref;
    ref.meta = st.meta[pos];
    for (size_t f = 0; f < st.fields.size(); ++f) ref.fields.push_back(st.slab(f, pos));
    refs.push_back(std::move(ref));
  }
  BALLAST_RETURN_IF_ERROR(Rebuild(refs));
  // A new window measures change from here.
  for (size_t p = 0; p < sharded_.size(); ++p) {
    const size_t base = p * kFieldsPerParam;
    compute().Copy(st.fields[base + kValue].data(), st.fields[base + kSnapshot].data(),
                   n * sharded_[p].unit_elems);
  }
  return compute().Synchronize();
}

absl::Status ParallelBlock::Rebuild(const std::vector<SlabRef>& units) {
  Storage& st = *storage_;
  std::vector<Buffer> fields(st.fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    BALLAST_ASSIGN_OR_RETURN(fields[f], compute().Allocate(units.size() * st.elems[f]));
    for (size_t i = 0; i < units.size(); ++i) {
      compute().Copy(units[i].fields[f], fields[f].data() + i * st.elems[f], st.elems[f]);
    }
  }
  // Sources may live in the old storage or in receive buffers; wait before freeing them.
  BALLAST_RETURN_IF_ERROR(compute().Synchronize());
  st.fields = std::move(fields);
  st.meta.clear();
  for (const SlabRef& ref : units) st.meta.push_back(ref.meta);
  return absl::OkStatus();
}

absl::Status ParallelBlock::Reshard(const std::vector<RankId>& new_owner) {
  Storage& st = *storage_;
  Compute& c = compute();
  const int32_t me = group_->rank().value();
  const int32_t size = group_->size();
  size_t unit_floats = kMetaFloats;
  for (size_t e : st.elems) unit_floats += e;

  // Every rank derives the same moves from the old and new ownership: units leave their
  // old owner for their new one, packed per destination in unit-id order, with all their
  // fields (weights, AdamW moments, snapshot, running mean) and their host metadata.
  std::vector<std::vector<int32_t>> out_positions(size);  // per destination
  std::vector<int32_t> retained;
  std::vector<int32_t> by_unit(st.units());
  std::iota(by_unit.begin(), by_unit.end(), 0);
  std::sort(by_unit.begin(), by_unit.end(),
            [&](int32_t a, int32_t b) { return st.meta[a].unit < st.meta[b].unit; });
  for (int32_t pos : by_unit) {
    const int32_t dest = new_owner[st.meta[pos].unit].value();
    if (dest == me) continue;
    out_positions[dest].push_back(pos);
  }
  for (int32_t pos = 0; pos < st.units(); ++pos) {
    if (new_owner[st.meta[pos].unit].value() == me) retained.push_back(pos);
  }
  std::vector<int32_t> in_counts(size, 0);
  for (int32_t u = 0; u < num_units_; ++u) {
    const int32_t from = owner_of_unit_[u].value();
    if (from != me && new_owner[u].value() == me) ++in_counts[from];
  }

  std::vector<Buffer> out_buffers(size), in_buffers(size);
  std::vector<PeerTransfer> sends, recvs;
  for (int32_t r = 0; r < size; ++r) {
    if (!out_positions[r].empty()) {
      BALLAST_ASSIGN_OR_RETURN(out_buffers[r], c.Allocate(out_positions[r].size() * unit_floats));
      float* dst = out_buffers[r].data();
      for (int32_t pos : out_positions[r]) {
        for (size_t f = 0; f < st.fields.size(); ++f) {
          c.Copy(st.slab(f, pos), dst, st.elems[f]);
          dst += st.elems[f];
        }
        float meta[kMetaFloats];
        std::memcpy(meta, &st.meta[pos], sizeof(UnitMeta));
        c.CopyFromHost(meta, dst, kMetaFloats);
        dst += kMetaFloats;
      }
      sends.push_back({r, out_buffers[r].data(), out_buffers[r].size()});
    }
    if (in_counts[r] > 0) {
      BALLAST_ASSIGN_OR_RETURN(in_buffers[r], c.Allocate(in_counts[r] * unit_floats));
      recvs.push_back({r, in_buffers[r].data(), in_buffers[r].size()});
    }
  }
  BALLAST_RETURN_IF_ERROR(group_->backend().comm().Exchange(sends, recvs));

  std::vector<SlabRef> refs;
  for (int32_t pos : retained) {
    SlabRef ref;
    ref.meta = st.meta[pos];
    for (size_t f = 0; f < st.fields.size(); ++f) ref.fields.push_back(st.slab(f, pos));
    refs.push_back(std::move(ref));
  }
  for (int32_t r = 0; r < size; ++r) {
    const float* src = in_buffers[r].data();
    for (int32_t i = 0; i < in_counts[r]; ++i) {
      SlabRef ref;
      for (size_t f = 0; f < st.fields.size(); ++f) {
        ref.fields.push_back(src);
        src += st.elems[f];
      }
      float meta[kMetaFloats];
      c.CopyToHost(src, meta, kMetaFloats);
      std::memcpy(&ref.meta, meta, sizeof(UnitMeta));
      src += kMetaFloats;
      refs.push_back(std::move(ref));
    }
  }
  // Keep priority order: the moved units take their place by their scores.
  std::stable_sort(refs.begin(), refs.end(), [](const SlabRef& a, const SlabRef& b) {
    if (a.meta.score != b.meta.score) return a.meta.score > b.meta.score;
    return a.meta.unit < b.meta.unit;
  });
  BALLAST_RETURN_IF_ERROR(Rebuild(refs));
  BALLAST_LOG(INFO) << "group=" << group_->group() << " rank=" << me << " block=" << id_
                    << " resharded: now owns " << st.units() << " of " << num_units_ << " units";
  owner_of_unit_ = new_owner;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ParallelBlock::GatherDense(ParamField field) {
  Storage& st = *storage_;
  Compute& c = compute();
  int kind = kValue;
  const Buffer* bias = &st.bias;
  switch (field) {
    case ParamField::kValue:
      break;
    case ParamField::kGrad:
      kind = kGrad;
      bias = &st.bias_grad;
      break;
    case ParamField::kAdamM:
      kind = kMoment1;
      bias = &st.bias_m;
      break;
    case ParamField::kAdamV:
      kind = kMoment2;
      bias = &st.bias_v;
      break;
  }
  std::vector<float> dense(DenseSize(), 0.0f);
  std::vector<std::vector<float>> host(sharded_.size());
  for (size_t p = 0; p < sharded_.size(); ++p) {
    host[p].resize(st.units() * sharded_[p].unit_elems);
    c.CopyToHost(st.fields[p * kFieldsPerParam + kind].data(), host[p].data(), host[p].size());
  }
  // Rank 0 alone contributes the replicated bias, so the sum below counts it once.
  std::vector<float> bias_host(replicated_size_, 0.0f);
  if (group_->rank().value() == 0) c.CopyToHost(bias->data(), bias_host.data(), replicated_size_);
  std::vector<const float*> slabs(sharded_.size());
  for (int32_t pos = 0; pos < st.units(); ++pos) {
    for (size_t p = 0; p < sharded_.size(); ++p) {
      slabs[p] = host[p].data() + pos * sharded_[p].unit_elems;
    }
    UnitToDense(static_cast<int32_t>(st.meta[pos].unit), slabs, nullptr, dense.data());
  }
  UnitToDense(-1, slabs, bias_host.data(), dense.data());
  BALLAST_ASSIGN_OR_RETURN(Buffer buffer, c.Allocate(dense.size()));
  c.CopyFromHost(dense.data(), buffer.data(), dense.size());
  BALLAST_RETURN_IF_ERROR(group_->backend().comm().AllReduceSum(buffer.data(), buffer.size()));
  c.CopyToHost(buffer.data(), dense.data(), dense.size());
  BALLAST_RETURN_IF_ERROR(c.Synchronize());
  return dense;
}

absl::StatusOr<BlockCheckpoint> ParallelBlock::SaveCheckpoint() {
  if (group_->in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", id_.value(), ": SaveCheckpoint called inside a step"));
  }
  BlockCheckpoint checkpoint;
  BALLAST_ASSIGN_OR_RETURN(checkpoint.value, GatherDense(ParamField::kValue));
  BALLAST_ASSIGN_OR_RETURN(checkpoint.adam_m, GatherDense(ParamField::kAdamM));
  BALLAST_ASSIGN_OR_RETURN(checkpoint.adam_v, GatherDense(ParamField::kAdamV));
  // Each unit's step count lives with its owner: a min-reduce with "no value" as the
  // largest int64 gathers them without another message type.
  checkpoint.unit_steps.assign(num_units_, std::numeric_limits<int64_t>::max());
  for (const UnitMeta& m : storage_->meta) checkpoint.unit_steps[m.unit] = m.adam_step;
  BALLAST_RETURN_IF_ERROR(group_->backend().comm().AllReduceMin(checkpoint.unit_steps.data(),
                                                                checkpoint.unit_steps.size()));
  checkpoint.bias_step = storage_->bias_step;
  return checkpoint;
}

absl::Status ParallelBlock::RestoreCheckpoint(const BlockCheckpoint& checkpoint) {
  const auto check = [&](const char* field, size_t got, size_t want) -> absl::Status {
    if (got == want) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": checkpoint ", field,
                                                   " has ", got, " elements, expected ", want));
  };
  BALLAST_RETURN_IF_ERROR(check("value", checkpoint.value.size(), DenseSize()));
  BALLAST_RETURN_IF_ERROR(check("adam_m", checkpoint.adam_m.size(), DenseSize()));
  BALLAST_RETURN_IF_ERROR(check("adam_v", checkpoint.adam_v.size(), DenseSize()));
  BALLAST_RETURN_IF_ERROR(check("unit_steps", checkpoint.unit_steps.size(), num_units_));
  for (int32_t u = 0; u < num_units_; ++u) {
    if (checkpoint.unit_steps[u] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": checkpoint unit ", u,
                                                     " has negative step count ",
                                                     checkpoint.unit_steps[u]));
    }
  }
  if (checkpoint.bias_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id_.value(), ": checkpoint bias_step ",
                                                   checkpoint.bias_step, " is negative"));
  }
  if (group_->in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", id_.value(), ": RestoreCheckpoint called inside a step"));
  }
  BALLAST_RETURN_IF_ERROR(LoadDenseVector(checkpoint.value));  // also resets the rest

  Storage& st = *storage_;
  ScatterDense(kMoment1, checkpoint.adam_m, st.bias_m);
  ScatterDense(kMoment2, checkpoint.adam_v, st.bias_v);
  for (UnitMeta& m : st.meta) m.adam_step = checkpoint.unit_steps[m.unit];
  st.bias_step = checkpoint.bias_step;
  return compute().Synchronize();
}

}  // namespace ballast
