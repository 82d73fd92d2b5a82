#include "ballast/tp_group.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker_lib/internal/emulated_slowdown.h"

namespace ballast {
namespace {

// A version's agreement slot. Hashed, because real versions are wall-clock microseconds
// spaced by round periods (250 ms = 250000 us, a multiple of 16): v mod H would put
// consecutive plans in the same slot. splitmix64's finaliser spreads them.
uint64_t SlotHash(int64_t version) {
  uint64_t x = static_cast<uint64_t>(version) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

TpGroup::TpGroup(const TpGroupOptions& options, Backend* backend)
    : options_(options), backend_(backend) {
  applied_.group = options_.group;
  shape_for_offer_.group = options_.group;
  shape_for_offer_.size = backend_->comm().size();
}

TpGroup::~TpGroup() = default;

absl::StatusOr<std::unique_ptr<TpGroup>> TpGroup::Create(const TpGroupOptions& options,
                                                         Backend* backend) {
  if (backend == nullptr) return absl::InvalidArgumentError("backend is null");
  if (options.group.value().empty()) return absl::InvalidArgumentError("group id is empty");
  if (options.plan_history < 1 || options.plan_history > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_history ", options.plan_history, " out of range [1, 1024]"));
  }
  std::unique_ptr<TpGroup> group(new TpGroup(options, backend));
  group->agreement_timer_ = backend->compute().NewTimer();
  std::string slowdown_file = options.emulated_slowdown_file;
  if (slowdown_file.empty()) {
    const char* env = std::getenv(internal::kEmulatedSlowdownFileEnv);
    if (env != nullptr) slowdown_file = env;
  }
  if (!slowdown_file.empty()) {
    if (std::strcmp(backend->name(), "cpu") != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group ", options.group.value(), ": an emulated slowdown (", slowdown_file,
          ", from TpGroupOptions or $", internal::kEmulatedSlowdownFileEnv, ") needs the cpu ",
          "backend, not ", backend->name(), ": it burns host time, which does not slow a GPU"));
    }
    group->emulated_slowdown_ = std::make_unique<internal::EmulatedSlowdown>(
        slowdown_file,
        absl::StrCat("group=", options.group.value(), " rank=", backend->comm().rank()));
    BALLAST_LOG(INFO) << "group=" << options.group << " rank=" << backend->comm().rank()
                      << " emulated slowdown: block compute slowed by the factor in "
                      << slowdown_file << " (re-read every step; missing = 1x)";
  }
  return group;
}

absl::Status TpGroup::Register(ParallelBlock* block) {
  if (in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", block->id().value(), " created inside a step"));
  }
  if (FindBlock(block->id()) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(
        "block id ", block->id().value(), " already exists in group ", options_.group.value()));
  }
  blocks_.push_back(block);
  absl::MutexLock lock(&mu_);
  shape_for_offer_ = Shape();
  return absl::OkStatus();
}

void TpGroup::Unregister(ParallelBlock* block) {
  blocks_.erase(std::remove(blocks_.begin(), blocks_.end(), block), blocks_.end());
  absl::MutexLock lock(&mu_);
  shape_for_offer_ = Shape();
}

ParallelBlock* TpGroup::FindBlock(BlockId id) const {
  for (ParallelBlock* b : blocks_) {
    if (b->id() == id) return b;
  }
  return nullptr;
}

GroupShape TpGroup::Shape() const {
  GroupShape shape;
  shape.group = options_.group;
  shape.size = size();
  for (const ParallelBlock* b : blocks_) shape.blocks.push_back(b->Shape());
  return shape;
}

GroupShape TpGroup::ShapeSnapshot() const {
  absl::MutexLock lock(&mu_);
  return shape_for_offer_;
}

absl::Status TpGroup::OfferPlan(WorkloadPlan plan) {
  absl::MutexLock lock(&mu_);
  if (plan.version.value() <= applied_version_for_offer_) {
    return absl::InvalidArgumentError(absl::StrCat("plan version ", plan.version.value(),
                                                   " is not newer than applied version ",
                                                   applied_version_for_offer_));
  }
  BALLAST_RETURN_IF_ERROR(ValidatePlan(plan, shape_for_offer_));
  const int64_t v = plan.version.value();
  if (auto it = held_.find(v); it != held_.end()) {
    if (it->second == plan) return absl::OkStatus();  // a redelivery
    return absl::InvalidArgumentError(
        absl::StrCat("plan version ", v, " already held with different content"));
  }
  held_.emplace(v, std::move(plan));
  // Keep the newest plan_history versions. Versions need not be consecutive (the
  // coordinator's are wall-clock microseconds), so two held versions may share an
  // agreement slot (v mod plan_history): a slot then agrees on nothing that step, which
  // costs an opportunity, never a wrong agreement.
  while (static_cast<int32_t>(held_.size()) > options_.plan_history) {
    held_.erase(held_.begin());
  }
  return absl::OkStatus();
}

absl::Status TpGroup::BeginStep() {
  if (in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group ", options_.group.value(), ": BeginStep twice without EndStep"));
  }
  if (emulated_slowdown_ != nullptr) emulated_slowdown_->Refresh(step_);
  agreement_timer_->Reset();
  agreement_timer_->Start();

  // Agreement: see the protocol in tp_group.h.
  const int64_t h = options_.plan_history;
  const int64_t applied = applied_.version.value();
  std::vector<int64_t> slots(2 * h, 0);
  // The plans this rank contributes, copied: OfferPlan may evict them from held_ while the
  // all-reduce runs, and a version the group agrees on must still be applied here.
  std::map<int64_t, WorkloadPlan> offered;
  std::vector<bool> collided(h, false);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [v, plan] : held_) {
      if (v <= applied) continue;
      // Colliding versions: a slot holding two different values would make ranks disagree
      // about it anyway, so this rank leaves it unusable (0) this step.
      const int64_t s = static_cast<int64_t>(SlotHash(v) % static_cast<uint64_t>(h));
      if (collided[s] || slots[s] != 0) {
        collided[s] = true;
        offered.erase(slots[s]);
        slots[s] = slots[h + s] = 0;
        continue;
      }
      offered.emplace(v, plan);
      slots[s] = v;
      slots[h + s] = -v;
    }
  }
  absl::Status status = backend_->comm().AllReduceMin(slots.data(), slots.size());
  if (!status.ok()) {
    agreement_timer_->Stop();
    return absl::Status(status.code(), absl::StrCat("group ", options_.group.value(),
                                                    ": plan agreement: ", status.message()));
  }
  int64_t agreed = 0;
  for (int64_t s = 0; s < h; ++s) {
    if (slots[s] > 0 && slots[s] == -slots[h + s]) agreed = std::max(agreed, slots[s]);
  }
  if (agreed > applied) {
    // Every rank contributed `agreed` in its slot, so every rank has it in `offered`.
    WorkloadPlan plan = offered.at(agreed);
    {
      absl::MutexLock lock(&mu_);
      held_.erase(held_.begin(), held_.upper_bound(agreed));
    }
    // Validation against the state at this boundary is deterministic, so every rank takes
    // the same branch and the group stays in step.
    absl::Status valid = ValidatePlan(plan, Shape());
    if (valid.ok()) {
      BALLAST_RETURN_IF_ERROR(ApplyPlan(plan));
    } else {
      last_rejection_ = valid;
      BALLAST_LOG(WARNING) << "group=" << options_.group << " rank=" << rank() << " step=" << step_
                           << " skipped plan: " << valid.message();
    }
    absl::MutexLock lock(&mu_);
    applied_version_for_offer_ = applied_.version.value();
    shape_for_offer_ = Shape();
  }
  for (ParallelBlock* b : blocks_) {
    status = b->BeginStep(step_);
    if (!status.ok()) break;
  }
  agreement_timer_->Stop();
  BALLAST_RETURN_IF_ERROR(status);
  in_step_ = true;
  return absl::OkStatus();
}

std::unique_ptr<IntervalTimer> TpGroup::ComputeTimer() {
  std::unique_ptr<IntervalTimer> timer = backend_->compute().NewTimer();
  if (emulated_slowdown_ == nullptr) return timer;
  return emulated_slowdown_->WrapTimer(std::move(timer));
}

absl::Status TpGroup::ApplyPlan(const WorkloadPlan& plan) {
  for (ParallelBlock* b : blocks_) {
    const BlockPlan* bp = nullptr;
    for (const BlockPlan& candidate : plan.blocks) {
      if (candidate.block == b->id()) bp = &candidate;
    }
    BALLAST_RETURN_IF_ERROR(b->ApplyPlan(bp, plan.imputation, plan.priority));
  }
  BALLAST_LOG(INFO) << "group=" << options_.group << " rank=" << rank() << " step=" << step_
                    << " applied plan " << PlanSummary(plan);
  applied_ = plan;
  return absl::OkStatus();
}

absl::Status TpGroup::EndStep() {
  if (!in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group ", options_.group.value(), ": EndStep without BeginStep"));
  }
  // Void compute calls keep their first failure for Synchronize, which nothing else in a
  // step calls: without this a failed GEMM launch would end the step OK on garbage.
  if (absl::Status computed = backend_->compute().Synchronize(); !computed.ok()) {
    in_step_ = false;
    return absl::Status(computed.code(), absl::StrCat("group ", options_.group.value(), " step ",
                                                      step_, ": ", computed.message()));
  }
  StepTimings timings;
  timings.step = step_;
  timings.plan_version = applied_.version;
  timings.plan_number = applied_.number;
  BALLAST_ASSIGN_OR_RETURN(timings.agreement_seconds, agreement_timer_->Seconds());
  for (ParallelBlock* b : blocks_) {
    BALLAST_RETURN_IF_ERROR(b->EndStep());
    timings.blocks.push_back(b->timing());
  }
  last_timings_ = std::move(timings);
  ++step_;
  in_step_ = false;
  return absl::OkStatus();
}

}  // namespace ballast
