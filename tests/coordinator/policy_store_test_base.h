// Helpers shared by the policy store's tests (policy_store_test.cc,
// sqlite_policy_store_test.cc): a fresh database file name per test, its removal, and a
// policy with every field away from its default.
#ifndef BALLAST_TESTS_COORDINATOR_POLICY_STORE_TEST_BASE_H_
#define BALLAST_TESTS_COORDINATOR_POLICY_STORE_TEST_BASE_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/policy_store.h"

namespace ballast::coordinator {

// A fresh file name per call under the test temp dir, so tests (and concurrent runs of
// the suite) never share a database.
inline std::string UniquePath(absl::string_view tag) {
  static std::atomic<int> counter{0};
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info != nullptr ? info->name() : "test", "_", tag);
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return absl::StrCat(::testing::TempDir(), "ballast_policy_", getpid(), "_", counter++, "_", name,
                      ".db");
}

inline void RemoveDatabase(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}

// Every field away from its default, so a field the store forgot cannot pass by luck.
inline JobPolicy NonDefaultPolicy() {
  JobPolicy p;
  p.mode = BalanceMode::kMigrate;
  p.max_pruned_fraction_rank = 0.3;
  p.max_pruned_fraction_group = 0.125;
  p.imputation = Imputation::kZero;
  p.priority = Priority::kRoundRobin;
  p.accuracy_weight_seconds = 2.75;
  p.straggler_threshold = 0.15;
  p.hysteresis = 0.07;
  p.reshard_after = absl::Seconds(90);
  p.report_period = absl::Milliseconds(2500);
  p.expert_capacity_factor = 0.5;
  return p;
}

}  // namespace ballast::coordinator

#endif  // BALLAST_TESTS_COORDINATOR_POLICY_STORE_TEST_BASE_H_
