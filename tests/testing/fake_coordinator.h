// A Coordinator on fakes: a FakeClock, an InMemoryPolicyStore and its own SpeedModel, as
// the coordinator's tests and the fuzz targets (fuzz/fuzz_common.h) build it. Header-only:
// a target that includes it links ballast_coordinator_core.
//
//   ballast::testing::FakeCoordinator fc;
//   ASSERT_TRUE(fc.Start({.forget_after = absl::Seconds(30)}).ok());
//   ASSERT_TRUE(fc.coordinator->AgentConnected(hello, &sink).ok());
//   fc.AdvanceAndTick(absl::Milliseconds(100));  // time passes, one decision round runs
//   ASSERT_TRUE(fc.Start().ok());  // a restart: a new coordinator over the same store
#ifndef BALLAST_TESTS_TESTING_FAKE_COORDINATOR_H_
#define BALLAST_TESTS_TESTING_FAKE_COORDINATOR_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "coordinator/speed_model.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"

namespace ballast::testing {

struct FakeCoordinator {
  // (Re)creates the speed model and the coordinator with `options` over the same clock
  // and store, as after a coordinator restart. INVALID_ARGUMENT for bad options.
  absl::Status Start(const coordinator::CoordinatorOptions& options = {}) {
    coordinator.reset();
    absl::StatusOr<std::unique_ptr<coordinator::SpeedModel>> model =
        coordinator::SpeedModel::Create(coordinator::SpeedModelOptions{}, &clock);
    if (!model.ok()) return model.status();
    speeds = *std::move(model);
    absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> created =
        coordinator::Coordinator::Create(options, &clock, &store, speeds.get());
    if (!created.ok()) return created.status();
    coordinator = *std::move(created);
    return absl::OkStatus();
  }

  // Moves the clock on by `d` and runs one decision round.
  void AdvanceAndTick(absl::Duration d) {
    clock.Advance(d);
    coordinator->Tick();
  }

  FakeClock clock;
  InMemoryPolicyStore store;
  std::unique_ptr<coordinator::SpeedModel> speeds;
  std::unique_ptr<coordinator::Coordinator> coordinator;
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_FAKE_COORDINATOR_H_
