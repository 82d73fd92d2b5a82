// The agent's Prometheus metrics: workers attached, the coordinator session, and what
// happened to reports and plans. Derived from AgentState::stats() and the session, like
// the coordinator's, so they never disagree with the agent's own view.
#ifndef BALLAST_AGENT_METRICS_H_
#define BALLAST_AGENT_METRICS_H_

#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "agent/agent_state.h"

namespace ballast::agent {

class AgentMetrics {
 public:
  AgentMetrics(prometheus::Registry& registry, const std::string& node,
               const std::string& version);
  void Update(const AgentStats& stats, bool coordinator_connected, int64_t connects);

 private:
  static void Mirror(prometheus::Counter& counter, int64_t value);

  prometheus::Gauge& workers_;
  prometheus::Gauge& connected_;
  prometheus::Counter& connects_;
  prometheus::Counter& queued_;
  prometheus::Counter& dropped_;
  prometheus::Counter& rejected_;
  prometheus::Counter& plans_;
};

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_METRICS_H_
