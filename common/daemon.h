// What every Ballast daemon does the same way: serve Prometheus metrics, and stop
// cleanly on SIGINT / SIGTERM.
//
//   auto exposer = ServeMetrics(flag_metrics, registry);   // "" = metrics off
//   if (!exposer.ok()) { log; return 1; }
//   absl::Notification& stop = ShutdownOnSignal();
//   while (!stop.WaitForNotificationWithTimeout(period)) { ... }
#ifndef BALLAST_COMMON_DAEMON_H_
#define BALLAST_COMMON_DAEMON_H_

#include <memory>
#include <string>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"

namespace ballast {

// Serves `registry` on http://`address`/metrics; a null exposer when `address` is empty.
// UNAVAILABLE (naming the address) when it cannot listen.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> ServeMetrics(
    const std::string& address, std::shared_ptr<prometheus::Registry> registry);

// Installs SIGINT and SIGTERM handlers (once per process) that notify the returned
// notification.
absl::Notification& ShutdownOnSignal();

}  // namespace ballast

#endif  // BALLAST_COMMON_DAEMON_H_
