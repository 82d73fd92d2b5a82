// Shared setup of the fuzz targets (fuzz/*_fuzz.cc): an in-process coordinator on a fake
// clock and an in-memory policy store, the tests' own fixture (tests/testing/
// fake_coordinator.h) with small caps, and the checks a target makes on what comes out.
//
//   FuzzCoordinator c;                     // fresh per input: runs stay reproducible
//   c.coordinator->AgentConnected(hello, &sink);
//   c.AdvanceAndTick(step.advance_ms());
//
// A target reports a finding by crashing: FUZZ_CHECK aborts with the broken property, so
// libFuzzer (and the corpus replay under ASan) records the input.
#ifndef BALLAST_FUZZ_FUZZ_COMMON_H_
#define BALLAST_FUZZ_FUZZ_COMMON_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ballast/v1/agent.pb.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "proto/convert.h"
#include "testing/fake_coordinator.h"

#define FUZZ_CHECK(condition, what)                                                              \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #condition, \
                   std::string(what).c_str());                                                   \
      std::abort();                                                                              \
    }                                                                                            \
  } while (false)

namespace ballast::fuzz {

// Silences the operator log: one line per rejected input would cost more than the input.
// Errors still print (a target that logs ERROR is worth seeing).
inline void QuietLogs() {
  static const bool once = [] {
    SetMinLogSeverity(LogSeverity::kError);
    return true;
  }();
  (void)once;
}

// Longest single clock step an input may ask for: past forget_after below, so inputs can
// reach the forgetting of idle groups and agents, yet bounded so time never overflows.
inline constexpr uint32_t kMaxAdvanceMs = 60'000;

// The agent sink of one session: records plans and checks what the coordinator promises
// about them (coordinator/coordinator.h): a plan decodes, and its version never goes back
// for a group (versions are wall-clock microseconds, strictly increasing per group; a
// reconnect replays the plan in force, so equal is fine).
class CheckingSink final : public coordinator::AgentSink {
 public:
  void Send(const v1::CoordinatorMessage& message) override {
    if (!message.has_plan()) return;
    const v1::WorkloadPlan& plan = message.plan().plan();
    absl::StatusOr<WorkloadPlan> decoded = FromProto(plan);
    FUZZ_CHECK(decoded.ok(), decoded.status().ToString());
    FUZZ_CHECK(plan.version() > 0, "pushed plan without a version");
    absl::MutexLock lock(&mu_);
    int64_t& last = last_version_[{message.plan().job(), plan.group()}];
    FUZZ_CHECK(plan.version() >= last, "plan version went back for group " + plan.group());
    last = plan.version();
    ++plans_;
  }
  int64_t plans() const {
    absl::MutexLock lock(&mu_);
    return plans_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> last_version_ ABSL_GUARDED_BY(mu_);
  int64_t plans_ ABSL_GUARDED_BY(mu_) = 0;
};

// A coordinator on fakes with small caps and a short forget_after, so short inputs reach
// the limits. Its clock, store, speed model and coordinator are the fixture's members.
struct FuzzCoordinator : testing::FakeCoordinator {
  FuzzCoordinator() {
    QuietLogs();
    const absl::Status started = Start({.link_bytes_per_second = 1e6,
                                        .forget_after = absl::Seconds(30),
                                        .max_workers_per_agent = 16,
                                        .max_groups_per_agent = 4,
                                        .max_jobs_per_agent = 3});
    FUZZ_CHECK(started.ok(), started.ToString());
  }

  // Moves the clock on (at most kMaxAdvanceMs) and runs one decision round.
  void AdvanceAndTick(uint32_t ms) {
    FakeCoordinator::AdvanceAndTick(absl::Milliseconds(ms % (kMaxAdvanceMs + 1)));
  }
};

// What every admin view must do on any state: answer without crashing, and describe only
// groups it can explain.
inline void CheckAdminViews(const coordinator::Coordinator& c) {
  absl::StatusOr<v1::ClusterStatus> status = c.Status("");
  FUZZ_CHECK(status.ok(), status.status().ToString());
  for (const v1::JobStatus& job : status->jobs()) {
    for (const v1::GroupStatus& group : job.groups()) {
      absl::StatusOr<v1::Explanation> e = c.Explain(job.job(), group.group());
      FUZZ_CHECK(e.ok(), e.status().ToString());
      FUZZ_CHECK(e->plan_version() == group.plan_version(), "Explain and Status disagree");
    }
  }
}

}  // namespace ballast::fuzz

#endif  // BALLAST_FUZZ_FUZZ_COMMON_H_
