#include "common/daemon.h"

#include <csignal>
#include <thread>

#include "absl/strings/str_cat.h"

namespace ballast {
namespace {

// A signal handler may only touch a sig_atomic_t; a watcher thread turns the flag into
// the notification (absl::Notification::Notify takes a mutex: not async-signal-safe).
volatile std::sig_atomic_t signalled = 0;

void OnSignal(int) { signalled = 1; }

}  // namespace

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> ServeMetrics(
    const std::string& address, std::shared_ptr<prometheus::Registry> registry) {
  if (address.empty()) return std::unique_ptr<prometheus::Exposer>();
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(address);
    exposer->RegisterCollectable(registry);
    return exposer;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
}

absl::Notification& ShutdownOnSignal() {
  static absl::Notification* notification = [] {
    auto* n = new absl::Notification();
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::thread([n] {
      while (signalled == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      n->Notify();
    }).detach();
    return n;
  }();
  return *notification;
}

}  // namespace ballast
