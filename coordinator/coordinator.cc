#include "coordinator/coordinator.h"

#include <malloc.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/validate.h"

namespace ballast::coordinator {
namespace {

// Hands the free pages of every malloc arena back to the system.
void ReturnFreedMemory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

Coordinator::Coordinator(const CoordinatorOptions& options, Clock* clock, SpeedModel* speeds,
                         std::unique_ptr<JobSettings> settings)
    : clock_(clock),
      settings_(std::move(settings)),
      registry_(RegistryOptions{.link_stale_after = options.link_stale_after,
                                .forget_after = options.forget_after,
                                .shape = {.max_units_per_block = options.max_units_per_block,
                                          .max_blocks_per_worker = options.max_blocks_per_worker},
                                .max_workers_per_agent = options.max_workers_per_agent,
                                .max_groups_per_agent = options.max_groups_per_agent,
                                .max_jobs_per_agent = options.max_jobs_per_agent,
                                .max_shape_bytes_per_agent = options.max_shape_bytes_per_agent},
                clock, speeds),
      judge_(clock, options.marginal_straggler_for, options.known_kind_wait_min,
             options.known_kind_wait_max, options.known_kind_blip_memory),
      loop_(DecisionLoopOptions{.link_bytes_per_second = options.link_bytes_per_second,
                                .dwell = {.plan_dwell = options.plan_dwell,
                                          .dwell_hysteresis = options.dwell_hysteresis,
                                          .flap_hold = options.flap_hold},
                                .fixed_costs = options.fixed_costs,
                                .straggler_kind = options.straggler_kind,
                                .reshard_slower_devices = options.reshard_slower_devices,
                                .reshard_throttled_ranks = options.reshard_throttled_ranks,
                                .reshard_still_last = options.reshard_still_last,
                                .throttled_price = options.throttled_price,
                                .unit_count_fit = options.unit_count_fit,
                                .step_feedback = options.step_feedback,
                                .offload_check = options.offload_check},
            clock, &registry_, &judge_, settings_.get(), speeds),
      reads_(options.link_bytes_per_second, clock, &registry_, &judge_, settings_.get(), &loop_,
             speeds) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(const CoordinatorOptions& options,
                                                                 Clock* clock, PolicyStore* store,
                                                                 SpeedModel* speeds) {
  if (clock == nullptr || store == nullptr || speeds == nullptr) {
    return absl::InvalidArgumentError("clock, store and speed model are required");
  }
  if (!(options.link_bytes_per_second > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("link_bytes_per_second ", options.link_bytes_per_second, " must be > 0"));
  }
  if (options.link_stale_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link_stale_after ", absl::FormatDuration(options.link_stale_after), " must be > 0"));
  }
  if (options.marginal_straggler_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("marginal_straggler_for ",
                     absl::FormatDuration(options.marginal_straggler_for), " must be >= 0"));
  }
  if (options.known_kind_wait_min < absl::ZeroDuration() ||
      options.known_kind_wait_max < options.known_kind_wait_min) {
    return absl::InvalidArgumentError(
        absl::StrCat("known_kind_wait_min ", absl::FormatDuration(options.known_kind_wait_min),
                     " and known_kind_wait_max ", absl::FormatDuration(options.known_kind_wait_max),
                     ": need 0 <= min <= max"));
  }
  if (options.known_kind_blip_memory <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("known_kind_blip_memory ",
                     absl::FormatDuration(options.known_kind_blip_memory), " must be > 0"));
  }
  if (options.plan_dwell < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_dwell ", absl::FormatDuration(options.plan_dwell), " must be >= 0"));
  }
  // At most an hour: a flapping group's hold grows to 16 times it.
  if (options.flap_hold < absl::ZeroDuration() || options.flap_hold > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flap_hold ", absl::FormatDuration(options.flap_hold), " out of range [0, 1h]"));
  }
  BALLAST_RETURN_IF_ERROR(ValidateStragglerKindOptions(options.straggler_kind));
  if (options.step_feedback.has_value()) {
    BALLAST_RETURN_IF_ERROR(ValidateStepFeedbackOptions(*options.step_feedback));
  }
  if (options.offload_check.has_value()) {
    BALLAST_RETURN_IF_ERROR(ValidateOffloadCheckOptions(*options.offload_check));
  }
  if (!(options.dwell_hysteresis >= 0 && options.dwell_hysteresis <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dwell_hysteresis ", options.dwell_hysteresis, " out of range [0, 1]"));
  }
  if (options.forget_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("forget_after ", absl::FormatDuration(options.forget_after), " must be > 0"));
  }
  for (auto [name, cap] :
       {std::pair<const char*, int64_t>{"max_workers_per_agent", options.max_workers_per_agent},
        {"max_groups_per_agent", options.max_groups_per_agent},
        {"max_jobs_per_agent", options.max_jobs_per_agent},
        {"max_units_per_block", options.max_units_per_block},
        {"max_blocks_per_worker", options.max_blocks_per_worker},
        {"max_shape_bytes_per_agent", options.max_shape_bytes_per_agent}}) {
    if (cap < 1) return absl::InvalidArgumentError(absl::StrCat(name, " ", cap, " must be >= 1"));
  }
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<JobSettings> settings, JobSettings::Load(store, clock));
  return std::unique_ptr<Coordinator>(new Coordinator(options, clock, speeds, std::move(settings)));
}

void Coordinator::Tick() {
  const bool forgot = loop_.Tick();
  bool trim = false;
  {
    absl::MutexLock lock(&trim_mu_);
    trim_pending_ = forgot || trim_pending_;
    trim = trim_pending_ && clock_->Monotonic() >= next_trim_;
    if (trim) {
      trim_pending_ = false;
      next_trim_ = clock_->Monotonic() + kTrimInterval;
    }
  }
  // glibc keeps the pages of freed state in its arenas, so without this the resident size
  // would stay at the high-water mark of jobs ever held (the soak: 142 MB -> 205 MB while
  // the heap in use stayed flat). Outside every lock: a trim walks every arena.
  if (trim) ReturnFreedMemory();
}

absl::Status Coordinator::SetPolicy(const std::string& job, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  // Durable first (JobSettings): an operator's setting is never in force without being
  // stored.
  BALLAST_RETURN_IF_ERROR(settings_->SetPolicy(job, policy));
  loop_.ReplanNow(job);
  return absl::OkStatus();
}

absl::Status Coordinator::SetPaused(const std::string& job, bool paused) {
  if (!job.empty()) BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  return settings_->SetPaused(job, paused);
}

absl::Status Coordinator::SetCordon(const std::string& device, bool cordoned,
                                    const std::string& reason) {
  BALLAST_RETURN_IF_ERROR(ValidateName("device", device));
  BALLAST_RETURN_IF_ERROR(ValidateReason("reason", reason));
  BALLAST_RETURN_IF_ERROR(settings_->SetCordon(device, cordoned, reason));
  loop_.ReplanNow("");
  return absl::OkStatus();
}

absl::Status Coordinator::SetHold(const std::string& job, const std::string& group,
                                  const std::optional<GroupHold>& hold) {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidateName("group", group));
  if (hold.has_value()) {
    // Held groups are known ones: their size says which ranks a hold may name, and a typo
    // holds nothing.
    const std::optional<GroupSnapshot> snapshot = registry_.Snapshot({job, group}, false);
    if (!snapshot.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("job ", job, " has no group ", group, ": nothing to hold"));
    }
    BALLAST_RETURN_IF_ERROR(ValidateHold(*hold, snapshot->size));
  }
  BALLAST_RETURN_IF_ERROR(settings_->SetHold(job, group, hold));
  loop_.ReplanNow(job);
  return absl::OkStatus();
}

CoordinatorObservations Coordinator::TakeObservations() {
  return CoordinatorObservations{.plan_latency_seconds = registry_.TakePlanLatencies(),
                                 .decision_seconds = loop_.TakeDecisionSeconds()};
}

CoordinatorCounters Coordinator::counters() const {
  const RegistryCounters r = registry_.counters();
  return CoordinatorCounters{.reports_accepted = r.reports_accepted,
                             .reports_rejected = r.reports_rejected,
                             .reports_dropped_by_agents = r.reports_dropped_by_agents,
                             .plans_pushed = r.plans_pushed,
                             .plan_changes = r.plan_changes,
                             .decisions = loop_.decisions(),
                             .groups_forgotten = r.groups_forgotten,
                             .agents_forgotten = r.agents_forgotten};
}

}  // namespace ballast::coordinator
