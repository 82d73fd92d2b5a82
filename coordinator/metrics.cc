#include "coordinator/metrics.h"

#include <malloc.h>

#include <prometheus/family.h>

namespace ballast::coordinator {

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry, const std::string& version)
    : build_info_(prometheus::BuildGauge()
                      .Name("ballast_build_info")
                      .Help("Build information; always 1")
                      .Register(registry)),
      reports_(prometheus::BuildCounter()
                   .Name("ballast_coordinator_reports_total")
                   .Help("Worker step reports received, by result")
                   .Register(registry)),
      reports_accepted_(reports_.Add({{"result", "accepted"}})),
      reports_rejected_(reports_.Add({{"result", "rejected"}})),
      reports_dropped_(reports_.Add({{"result", "dropped_by_agent"}})),
      plan_changes_(prometheus::BuildCounter()
                        .Name("ballast_coordinator_plan_changes_total")
                        .Help("New plan versions decided")
                        .Register(registry)
                        .Add({})),
      plans_pushed_(prometheus::BuildCounter()
                        .Name("ballast_coordinator_plans_pushed_total")
                        .Help("Plan messages sent to agents")
                        .Register(registry)
                        .Add({})),
      decisions_(prometheus::BuildCounter()
                     .Name("ballast_coordinator_decisions_total")
                     .Help("Group planning rounds")
                     .Register(registry)
                     .Add({})),
      outliers_(prometheus::BuildCounter()
                    .Name("ballast_coordinator_timing_outliers_total")
                    .Help("Timing samples rejected as one-off stalls")
                    .Register(registry)
                    .Add({})),
      forgotten_(prometheus::BuildCounter()
                     .Name("ballast_coordinator_forgotten_total")
                     .Help("Groups and agents forgotten after --forget_after without a "
                           "worker attached or reporting (groups) or a session (agents)")
                     .Register(registry)),
      groups_forgotten_(forgotten_.Add({{"what", "group"}})),
      agents_forgotten_(forgotten_.Add({{"what", "agent"}})),
      agents_(prometheus::BuildGauge()
                  .Name("ballast_coordinator_agents_connected")
                  .Help("Agents with a live session")
                  .Register(registry)
                  .Add({})),
      heap_in_use_(prometheus::BuildGauge()
                       .Name("ballast_coordinator_heap_in_use_bytes")
                       .Help("Heap bytes allocated and not freed (glibc mallinfo2; 0 under "
                             "another allocator): unlike the resident size it falls when "
                             "state is forgotten")
                       .Register(registry)
                       .Add({})),
      workers_(prometheus::BuildGauge()
                   .Name("ballast_coordinator_workers_attached")
                   .Help("Workers attached through a connected agent")
                   .Register(registry)
                   .Add({})),
      paused_(prometheus::BuildGauge()
                  .Name("ballast_coordinator_paused")
                  .Help("1 while balancing is paused cluster-wide")
                  .Register(registry)
                  .Add({})),
      rank_speed_(prometheus::BuildGauge()
                      .Name("ballast_rank_seconds_per_unit")
                      .Help("Measured compute seconds per unit of work (first block)")
                      .Register(registry)),
      rank_straggler_(prometheus::BuildGauge()
                          .Name("ballast_rank_straggler_state")
                          .Help("0 normal, 1 transient straggler, 2 chronic straggler, "
                                "3 stale, 4 cordoned, 5 detached")
                          .Register(registry)),
      rank_compute_(prometheus::BuildGauge()
                        .Name("ballast_rank_compute_seconds")
                        .Help("Compute seconds of the rank's latest step, over its blocks")
                        .Register(registry)),
      rank_collective_(prometheus::BuildGauge()
                           .Name("ballast_rank_collective_seconds")
                           .Help("Seconds in collectives (waits included) of the rank's latest "
                                 "step, over its blocks and the plan agreement")
                           .Register(registry)),
      group_pruned_(prometheus::BuildGauge()
                        .Name("ballast_group_pruned_ratio")
                        .Help("Share of the group's units pruned by the plan in force")
                        .Register(registry)),
      group_offloaded_(prometheus::BuildGauge()
                           .Name("ballast_group_offloaded_ratio")
                           .Help("Share of the group's units offloaded by the plan in force")
                           .Register(registry)),
      group_predicted_(prometheus::BuildGauge()
                           .Name("ballast_group_predicted_step_seconds")
                           .Help("Predicted seconds of the group's blocks per step: the planner's "
                                 "block compute plus the collectives' own cost")
                           .Register(registry)),
      group_measured_(prometheus::BuildGauge()
                          .Name("ballast_group_measured_step_seconds")
                          .Help("Slowest rank's compute + collective seconds in the group's "
                                "blocks per step, median of its last 16 reports")
                          .Register(registry)),
      group_plan_version_(prometheus::BuildGauge()
                              .Name("ballast_group_plan_timestamp_seconds")
                              .Help("When the plan in force was decided (its version)")
                              .Register(registry)),
      job_paused_(prometheus::BuildGauge()
                      .Name("ballast_job_paused")
                      .Help("1 while balancing of the job is paused (by job or cluster-wide)")
                      .Register(registry)),
      job_max_pruned_(prometheus::BuildGauge()
                          .Name("ballast_job_policy_max_pruned_ratio")
                          .Help("The job's pruning budget: at most this share of a rank's "
                                "(scope=rank) or a group's (scope=group) units")
                          .Register(registry)),
      plan_latency_(prometheus::BuildHistogram()
                        .Name("ballast_coordinator_plan_latency_seconds")
                        .Help("From a plan's decision until every attached rank of its group "
                              "reported a step run under it")
                        .Register(registry)
                        .Add({}, prometheus::Histogram::BucketBoundaries{
                                     0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30})),
      decision_seconds_(prometheus::BuildHistogram()
                            .Name("ballast_coordinator_decision_seconds")
                            .Help("Wall time of one group's planning round")
                            .Register(registry)
                            .Add({}, prometheus::Histogram::BucketBoundaries{
                                         1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1})),
      admin_denied_(prometheus::BuildCounter()
                        .Name("ballast_coordinator_admin_requests_denied_total")
                        .Help("Admin API calls refused: no_credentials and malformed answered "
                              "UNAUTHENTICATED, bad_token and cn_not_allowed PERMISSION_DENIED")
                        .Register(registry)),
      admin_denied_no_credentials_(admin_denied_.Add({{"reason", "no_credentials"}})),
      admin_denied_malformed_(admin_denied_.Add({{"reason", "malformed"}})),
      admin_denied_bad_token_(admin_denied_.Add({{"reason", "bad_token"}})),
      admin_denied_cn_not_allowed_(admin_denied_.Add({{"reason", "cn_not_allowed"}})) {
  build_info_.Add({{"component", "coordinator"}, {"version", version}}).Set(1);
}

void CoordinatorMetrics::Mirror(prometheus::Counter& counter, int64_t value) {
  const double delta = static_cast<double>(value) - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

void CoordinatorMetrics::Update(const v1::ClusterStatus& status,
                                const CoordinatorCounters& counters,
                                const SpeedModelCounters& speed_counters) {
  Mirror(reports_accepted_, counters.reports_accepted);
  Mirror(reports_rejected_, counters.reports_rejected);
  Mirror(reports_dropped_, counters.reports_dropped_by_agents);
  Mirror(plan_changes_, counters.plan_changes);
  Mirror(plans_pushed_, counters.plans_pushed);
  Mirror(decisions_, counters.decisions);
  Mirror(outliers_, speed_counters.outliers);
  Mirror(groups_forgotten_, counters.groups_forgotten);
  Mirror(agents_forgotten_, counters.agents_forgotten);
  agents_.Set(status.agents());
  // glibc keeps freed pages, so the resident size is the high-water mark of the live
  // state; what is in use now is what tells a leak from a past peak.
  const struct mallinfo2 heap = mallinfo2();
  heap_in_use_.Set(static_cast<double>(heap.uordblks + heap.hblkhd));
  workers_.Set(status.workers());
  paused_.Set(status.paused() ? 1 : 0);
  static const std::map<std::string, double> kStates = {
      {"normal", 0}, {"transient", 1}, {"chronic", 2},
      {"stale", 3},  {"cordoned", 4},  {"detached", 5}};
  std::set<std::string> live_jobs;
  std::set<GroupKey> live_groups;
  std::set<RankKey> live_ranks;
  for (const v1::JobStatus& job : status.jobs()) {
    live_jobs.insert(job.job());
    auto jit = jobs_.find(job.job());
    if (jit == jobs_.end()) {
      jit = jobs_
                .emplace(job.job(),
                         JobGauges{&job_paused_.Add({{"job", job.job()}}),
                                   &job_max_pruned_.Add({{"job", job.job()}, {"scope", "rank"}}),
                                   &job_max_pruned_.Add({{"job", job.job()}, {"scope", "group"}})})
                .first;
    }
    jit->second.paused->Set(job.paused() ? 1 : 0);
    jit->second.max_pruned_rank->Set(job.policy().max_pruned_fraction_rank());
    jit->second.max_pruned_group->Set(job.policy().max_pruned_fraction_group());
    for (const v1::GroupStatus& group : job.groups()) {
      const GroupKey gkey{job.job(), group.group()};
      live_groups.insert(gkey);
      auto git = groups_.find(gkey);
      if (git == groups_.end()) {
        const prometheus::Labels labels = {{"job", job.job()}, {"group", group.group()}};
        git = groups_
                  .emplace(gkey, GroupGauges{&group_pruned_.Add(labels),
                                             &group_offloaded_.Add(labels),
                                             &group_predicted_.Add(labels),
                                             &group_measured_.Add(labels),
                                             &group_plan_version_.Add(labels)})
                  .first;
      }
      git->second.pruned->Set(group.pruned_fraction());
      git->second.offloaded->Set(group.offloaded_fraction());
      git->second.predicted->Set(group.predicted_step_seconds());
      git->second.measured->Set(group.measured_step_seconds());
      git->second.plan_version->Set(static_cast<double>(group.plan_version()) / 1e6);
      for (const v1::RankStatus& rank : group.ranks()) {
        const RankKey rkey{job.job(), group.group(), rank.rank(), rank.device()};
        live_ranks.insert(rkey);
        auto rit = ranks_.find(rkey);
        if (rit == ranks_.end()) {
          const prometheus::Labels labels = {{"job", job.job()},
                                             {"group", group.group()},
                                             {"rank", std::to_string(rank.rank())},
                                             {"device", rank.device()}};
          rit = ranks_
                    .emplace(rkey, RankGauges{&rank_speed_.Add(labels),
                                              &rank_straggler_.Add(labels),
                                              &rank_compute_.Add(labels),
                                              &rank_collective_.Add(labels)})
                    .first;
        }
        rit->second.speed->Set(rank.seconds_per_unit());
        rit->second.compute->Set(rank.compute_seconds());
        rit->second.collective->Set(rank.collective_seconds());
        auto state = kStates.find(rank.state());
        rit->second.straggler->Set(state == kStates.end() ? 0 : state->second);
      }
    }
  }
  RemoveForgotten(live_jobs, live_groups, live_ranks);
}

namespace {

// Erases the entries of `cached` whose key is not in `live`, after `remove` took their
// series out of the registry.
template <typename Map, typename Live, typename Remove>
void EraseStale(Map& cached, const Live& live, Remove remove) {
  for (auto it = cached.begin(); it != cached.end();) {
    if (live.contains(it->first)) {
      ++it;
    } else {
      remove(it->second);
      it = cached.erase(it);
    }
  }
}

}  // namespace

void CoordinatorMetrics::RemoveForgotten(const std::set<std::string>& live_jobs,
                                         const std::set<GroupKey>& live_groups,
                                         const std::set<RankKey>& live_ranks) {
  EraseStale(ranks_, live_ranks, [&](const RankGauges& g) {
    rank_speed_.Remove(g.speed);
    rank_straggler_.Remove(g.straggler);
    rank_compute_.Remove(g.compute);
    rank_collective_.Remove(g.collective);
  });
  EraseStale(groups_, live_groups, [&](const GroupGauges& g) {
    group_pruned_.Remove(g.pruned);
    group_offloaded_.Remove(g.offloaded);
    group_predicted_.Remove(g.predicted);
    group_measured_.Remove(g.measured);
    group_plan_version_.Remove(g.plan_version);
  });
  EraseStale(jobs_, live_jobs, [&](const JobGauges& g) {
    job_paused_.Remove(g.paused);
    job_max_pruned_.Remove(g.max_pruned_rank);
    job_max_pruned_.Remove(g.max_pruned_group);
  });
}

void CoordinatorMetrics::Observe(const CoordinatorObservations& observations) {
  for (double s : observations.plan_latency_seconds) plan_latency_.Observe(s);
  for (double s : observations.decision_seconds) decision_seconds_.Observe(s);
}

void CoordinatorMetrics::UpdateAdminAuth(const AdminAuthCounters& counters) {
  Mirror(admin_denied_no_credentials_, counters.no_credentials);
  Mirror(admin_denied_malformed_, counters.malformed);
  Mirror(admin_denied_bad_token_, counters.bad_token);
  Mirror(admin_denied_cn_not_allowed_, counters.cn_not_allowed);
}

}  // namespace ballast::coordinator
