#include "agent/metrics.h"

#include <prometheus/family.h>

namespace ballast::agent {
namespace {

prometheus::Family<prometheus::Counter>& Reports(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("ballast_agent_reports_total")
      .Help("Worker step reports, by what became of them")
      .Register(registry);
}

}  // namespace

AgentMetrics::AgentMetrics(prometheus::Registry& registry, const std::string& node,
                           const std::string& version)
    : workers_(prometheus::BuildGauge()
                   .Name("ballast_agent_workers_attached")
                   .Help("Training processes attached to this agent")
                   .Register(registry)
                   .Add({{"node", node}})),
      connected_(prometheus::BuildGauge()
                     .Name("ballast_agent_coordinator_connected")
                     .Help("1 while the session to the coordinator is up")
                     .Register(registry)
                     .Add({{"node", node}})),
      connects_(prometheus::BuildCounter()
                    .Name("ballast_agent_coordinator_connects_total")
                    .Help("Sessions established with the coordinator (reconnects included)")
                    .Register(registry)
                    .Add({{"node", node}})),
      queued_(Reports(registry).Add({{"node", node}, {"result", "queued"}})),
      dropped_(Reports(registry).Add({{"node", node}, {"result", "dropped"}})),
      rejected_(Reports(registry).Add({{"node", node}, {"result", "rejected"}})),
      plans_(prometheus::BuildCounter()
                 .Name("ballast_agent_plans_relayed_total")
                 .Help("Plans delivered to attached workers")
                 .Register(registry)
                 .Add({{"node", node}})) {
  prometheus::BuildGauge()
      .Name("ballast_build_info")
      .Help("Build information; always 1")
      .Register(registry)
      .Add({{"version", version}, {"component", "agent"}})
      .Set(1);
}

void AgentMetrics::Mirror(prometheus::Counter& counter, int64_t value) {
  const double delta = static_cast<double>(value) - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

void AgentMetrics::Update(const AgentStats& stats, bool coordinator_connected, int64_t connects) {
  workers_.Set(static_cast<double>(stats.workers));
  connected_.Set(coordinator_connected ? 1 : 0);
  Mirror(connects_, connects);
  Mirror(queued_, stats.reports_queued);
  Mirror(dropped_, stats.reports_dropped);
  Mirror(rejected_, stats.reports_rejected);
  Mirror(plans_, stats.plans_relayed);
}

}  // namespace ballast::agent
