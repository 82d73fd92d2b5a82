// TpGroup: one rank's handle on a tensor-parallel group. It owns plan agreement, step
// boundaries and per-step timings; blocks register with it when they are created.
//
// Plan agreement (design brief section 3). Plans arrive asynchronously (OfferPlan, from
// any thread) and may reach ranks at different steps, in any order, or not at all. Each
// rank holds the newest `plan_history` (H) plans newer than the applied one. At BeginStep
// every rank contributes one all-reduce(min) over 2H int64s: slot (hash(v) mod H) carries
// v and -v for each held version v, 0 elsewhere (and 0 where two held versions collide: versions
// are arbitrary increasing numbers, e.g. the coordinator's wall-clock microseconds). A
// slot whose min and -min(-v) agree and are positive names a version every rank holds;
// the group applies the newest such version, if it is newer than the applied one. The
// plans a rank contributed are copied first, so a plan offered (and an old one evicted)
// while the all-reduce runs cannot take the agreed one away. One tiny collective per
// step, no leader, and the same decision on every rank, because it depends only on the
// reduced values.
//
// A plan that fails validation is rejected: OfferPlan returns the error when the plan is
// malformed in itself; a plan that only turns out invalid against the state at apply time
// (after a reshard) is skipped by every rank alike, and the applied plan stays in force.
//
//   auto group = ballast::TpGroup::Create({.group = ballast::GroupId("job/tp0")}, backend);
//   auto mlp = ballast::ParallelMlp::Create(group->get(), mlp_config);
//   for (step...) {
//     group->BeginStep();            // agrees on and applies the newest common plan
//     mlp->Forward(...); mlp->Backward(...); mlp->AdamWStep(adamw);
//     group->EndStep();              // finalises timings
//     Ship(group->last_step_timings());
//   }
#ifndef BALLAST_TP_GROUP_H_
#define BALLAST_TP_GROUP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ballast/backend.h"
#include "ballast/block.h"
#include "ballast/plan.h"
#include "ballast/step_timings.h"
#include "ballast/types.h"

namespace ballast {
namespace internal {
class EmulatedSlowdown;
}  // namespace internal

struct TpGroupOptions {
  GroupId group;
  // How many not-yet-applied plans a rank holds (and the agreement window width).
  int32_t plan_history = 16;
  // A file naming a factor by which this rank's block compute is made slower, emulating a
  // slower device (worker_lib/internal/emulated_slowdown.h; the harness's --contention
  // device); re-read at every BeginStep. Empty: $BALLAST_EMULATED_SLOWDOWN_FILE if set,
  // else none. CPU backend only: Create refuses one on another backend.
  std::string emulated_slowdown_file;
};

class TpGroup {
 public:
  // `backend` must outlive the group and every block created on it.
  static absl::StatusOr<std::unique_ptr<TpGroup>> Create(const TpGroupOptions& options,
                                                         Backend* backend);
  ~TpGroup();

  const GroupId& group() const { return options_.group; }
  RankId rank() const { return RankId(backend_->comm().rank()); }
  int32_t size() const { return backend_->comm().size(); }
  Backend& backend() { return *backend_; }

  // Hands in a plan; thread-safe, never blocks on the training step. Errors (naming the
  // field): another group, a version not newer than the applied one, fields out of range.
  absl::Status OfferPlan(WorkloadPlan plan) ABSL_LOCKS_EXCLUDED(mu_);

  // Collective. Agrees on the newest plan every rank holds and applies it (resharding if
  // ownership changes); rolls priority windows. Errors only on communication failure.
  absl::Status BeginStep();
  // Synchronizes the backend and finalises the step's timings. A compute call that failed
  // during the step without an error of its own (a void call: a CUDA launch) fails the
  // step here with that call's error; the step is over either way.
  absl::Status EndStep();

  int64_t step() const { return step_; }
  PlanVersion applied_version() const { return applied_.version; }
  const WorkloadPlan& applied_plan() const { return applied_; }
  // Timings of the last completed step.
  const StepTimings& last_step_timings() const { return last_timings_; }
  // Why the last plan skipped at apply time was skipped; OK if none was.
  const absl::Status& last_rejection() const { return last_rejection_; }

  // The shape plans are validated against (current ownership of every block). Training
  // thread only; other threads use ShapeSnapshot().
  GroupShape Shape() const;
  // The shape as of the last step boundary; safe from any thread.
  GroupShape ShapeSnapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  ParallelBlock* FindBlock(BlockId id) const;

 private:
  friend class ParallelBlock;
  TpGroup(const TpGroupOptions& options, Backend* backend);
  absl::Status Register(ParallelBlock* block);
  void Unregister(ParallelBlock* block);
  absl::Status ApplyPlan(const WorkloadPlan& plan);
  // A block's compute timer, slowed when the group emulates a slower device.
  std::unique_ptr<IntervalTimer> ComputeTimer();

  TpGroupOptions options_;
  Backend* backend_;
  std::vector<ParallelBlock*> blocks_;
  int64_t step_ = 0;
  bool in_step_ = false;
  WorkloadPlan applied_;
  absl::Status last_rejection_;
  StepTimings last_timings_;
  std::unique_ptr<IntervalTimer> agreement_timer_;
  // Null unless options_.emulated_slowdown_file (or the environment) names a file.
  std::unique_ptr<internal::EmulatedSlowdown> emulated_slowdown_;
  // Activation buffers shared by every block with UnitConfig::recompute (blocks run one at
  // a time on the training thread, and each recomputes its own before its Backward).
  std::vector<Buffer> recompute_cache_;

  mutable absl::Mutex mu_;
  std::map<int64_t, WorkloadPlan> held_ ABSL_GUARDED_BY(mu_);
  // Published by the training thread so OfferPlan can reject stale versions early.
  int64_t applied_version_for_offer_ ABSL_GUARDED_BY(mu_) = 0;
  // Shape at the last step boundary, for validating offers from other threads.
  GroupShape shape_for_offer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast

#endif  // BALLAST_TP_GROUP_H_
