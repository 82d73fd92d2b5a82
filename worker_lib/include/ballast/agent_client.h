// AgentClient: connects a training process to its node's Ballast agent.
//
// On a background thread it attaches to the agent's Unix socket, announces the worker
// (job, group, rank, device, blocks), ships step timings and hands the plans it receives
// to the TpGroup (OfferPlan is thread-safe; the group agrees on them at step boundaries).
// It never blocks or slows the training step: Report() only appends to a bounded queue,
// and when the queue is full the oldest timing is dropped and counted. If the agent is
// away, the client retries on the Backoff schedule of common/backoff.h while training goes
// on with the last agreed plan. The backoff starts over only once the agent has
// acknowledged an attach (its Welcome or any first directive; from an agent older than the
// Welcome, the stream still open `established_after` later on a connected channel: an agent
// refuses an attach by ending the stream at once), never merely because a stream was created; an
// outage logs its first failure, attempts 2, 4, 8..., and one line on reattaching.
//
//   ballast::AgentClientOptions options;
//   options.socket_path = "/run/ballast/agent.sock";
//   options.job = "vit"; options.device = "node-1/cpu0"; options.node = "node-1";
//   auto client = ballast::AgentClient::Start(options, group.get());
//   for (;;) { ... group->EndStep(); (*client)->Report(group->last_step_timings()); }
#ifndef BALLAST_AGENT_CLIENT_H_
#define BALLAST_AGENT_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ballast/tp_group.h"

namespace ballast {

class Clock;  // common/clock.h

struct AgentClientOptions {
  std::string socket_path = "/run/ballast/agent.sock";
  std::string job;
  std::string device;  // unique per cluster
  std::string node;
  // Timings held while the agent is slow or away; beyond this the oldest are dropped.
  int32_t queue_capacity = 256;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
  // How long an attach an agent older than the Welcome leaves unanswered must stay open to
  // count as acknowledged (see above).
  absl::Duration established_after = absl::Seconds(1);
  // Times the backoff and `established_after`; null: the real clock. For tests (a
  // FakeClock); a training program leaves it null. Not owned.
  Clock* clock = nullptr;
};

struct AgentClientStats {
  int64_t reports_sent = 0;
  int64_t reports_dropped = 0;
  int64_t plans_received = 0;
  int64_t plans_rejected = 0;  // failed validation in the group
  int64_t connects = 0;        // streams whose hello was sent, including reconnects
  int64_t attempts = 0;        // streams created: every attach tried
  bool connected = false;      // a stream is open and its hello sent
  bool established = false;    // ...and the agent acknowledged it (see above)
  // Waiting out a reconnect delay that has not elapsed yet on options.clock (a test moves
  // its fake clock only while this holds).
  bool backing_off = false;
};

class AgentClient {
 public:
  // Starts the background thread; returns at once (the first attach may still be pending).
  // `group` must outlive the client. Errors only on bad options.
  static absl::StatusOr<std::unique_ptr<AgentClient>> Start(const AgentClientOptions& options,
                                                            TpGroup* group);
  virtual ~AgentClient() = default;
  // Queues one step's timings for the agent. Never blocks.
  virtual void Report(const StepTimings& timings) = 0;
  virtual AgentClientStats stats() const = 0;
};

}  // namespace ballast

#endif  // BALLAST_AGENT_CLIENT_H_
