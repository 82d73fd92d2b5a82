// The coordinator's Prometheus metrics (see ../shared/conventions.md: one `ballast_`
// prefix, base units in names, bounded labels: job, group, rank, device).
//
// Everything is derived from the same snapshot the admin API serves (Coordinator::Status)
// plus the counters, so /metrics and `ballastctl status` never disagree. Metric objects
// are created once per label set and cached; Update() only sets values.
#ifndef BALLAST_COORDINATOR_METRICS_H_
#define BALLAST_COORDINATOR_METRICS_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "ballast/v1/admin.pb.h"
#include "coordinator/admin_auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/speed_model.h"

namespace ballast::coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry, const std::string& version);
  void Update(const v1::ClusterStatus& status, const CoordinatorCounters& counters,
              const SpeedModelCounters& speed_counters);
  // Admin calls refused, by reason: ballast_coordinator_admin_requests_denied_total.
  void UpdateAdminAuth(const AdminAuthCounters& counters);
  // Plan latency and decision time histograms, from Coordinator::TakeObservations().
  void Observe(const CoordinatorObservations& observations);

 private:
  // Counters mirror monotonic internal counts: increment by what is new.
  static void Mirror(prometheus::Counter& counter, int64_t value);
  using RankKey = std::tuple<std::string, std::string, int32_t, std::string>;
  using GroupKey = std::pair<std::string, std::string>;
  void RemoveForgotten(const std::set<std::string>& live_jobs, const std::set<GroupKey>& live_groups,
                       const std::set<RankKey>& live_ranks);

  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Counter>& reports_;
  prometheus::Counter& reports_accepted_;
  prometheus::Counter& reports_rejected_;
  prometheus::Counter& reports_dropped_;
  prometheus::Counter& plan_changes_;
  prometheus::Counter& plans_pushed_;
  prometheus::Counter& decisions_;
  prometheus::Counter& outliers_;
  prometheus::Family<prometheus::Counter>& forgotten_;
  prometheus::Counter& groups_forgotten_;
  prometheus::Counter& agents_forgotten_;
  prometheus::Gauge& agents_;
  prometheus::Gauge& heap_in_use_;
  prometheus::Gauge& workers_;
  prometheus::Gauge& paused_;
  prometheus::Family<prometheus::Gauge>& rank_speed_;
  prometheus::Family<prometheus::Gauge>& rank_straggler_;
  prometheus::Family<prometheus::Gauge>& rank_compute_;
  prometheus::Family<prometheus::Gauge>& rank_collective_;
  prometheus::Family<prometheus::Gauge>& group_pruned_;
  prometheus::Family<prometheus::Gauge>& group_offloaded_;
  prometheus::Family<prometheus::Gauge>& group_predicted_;
  prometheus::Family<prometheus::Gauge>& group_measured_;
  prometheus::Family<prometheus::Gauge>& group_plan_version_;
  prometheus::Family<prometheus::Gauge>& job_paused_;
  prometheus::Family<prometheus::Gauge>& job_max_pruned_;
  prometheus::Histogram& plan_latency_;
  prometheus::Histogram& decision_seconds_;

  struct RankGauges {
    prometheus::Gauge* speed;
    prometheus::Gauge* straggler;
    prometheus::Gauge* compute;
    prometheus::Gauge* collective;
  };
  struct GroupGauges {
    prometheus::Gauge* pruned;
    prometheus::Gauge* offloaded;
    prometheus::Gauge* predicted;
    prometheus::Gauge* measured;
    prometheus::Gauge* plan_version;
  };
  struct JobGauges {
    prometheus::Gauge* paused;
    prometheus::Gauge* max_pruned_rank;
    prometheus::Gauge* max_pruned_group;
  };
  // Series of jobs, groups and ranks the coordinator no longer knows (forgotten) are
  // removed at the next Update, so the number of series follows the live state.
  std::map<RankKey, RankGauges> ranks_;
  std::map<GroupKey, GroupGauges> groups_;
  std::map<std::string, JobGauges> jobs_;

  prometheus::Family<prometheus::Counter>& admin_denied_;
  prometheus::Counter& admin_denied_no_credentials_;
  prometheus::Counter& admin_denied_malformed_;
  prometheus::Counter& admin_denied_bad_token_;
  prometheus::Counter& admin_denied_cn_not_allowed_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_METRICS_H_
