// The emulated slower device (worker_lib/internal/emulated_slowdown.h): a block's compute
// seconds grow by the factor in the rank's slowdown file, its outputs do not change, and
// the factor follows the file from step to step. Timed on the test thread's CPU time (the
// backend's injectable clock), so the ratios hold on a busy machine; the bounds are loose.
#include "worker_lib/internal/emulated_slowdown.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ballast/backend.h"
#include "ballast/parallel_mlp.h"
#include "ballast/tp_group.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::testing::HasSubstr;

// The calling thread's CPU time as the monotonic reading: what the thread computed, not
// how long it waited for a core another build was using.
class ThreadCpuClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  absl::Duration Monotonic() const override {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return absl::DurationFromTimespec(ts);
  }
};

std::string TempPath(const std::string& name) {
  static int counter = 0;
  return absl::StrCat(::testing::TempDir(), "ballast_slowdown_", getpid(), "_", counter++, "_",
                      name);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// One rank of one, on the CPU backend timing with `clock`.
struct Rank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TpGroup> group;
};
absl::StatusOr<Rank> OneRank(const std::string& slowdown_file, const Clock* clock) {
  static int runs = 0;
  Rank rank;
  CpuBackendOptions options;
  options.prefix = absl::StrCat("slowdown-test-", getpid(), "-", runs++);
  options.clock = clock;
  BALLAST_ASSIGN_OR_RETURN(rank.backend, CreateCpuBackend(options));
  BALLAST_ASSIGN_OR_RETURN(rank.group, TpGroup::Create({.group = GroupId("test/tp"),
                                                        .emulated_slowdown_file = slowdown_file},
                                                       rank.backend.get()));
  return rank;
}

struct Step {
  double compute_seconds = 0;
  std::vector<float> y, dx;
};

TEST(EmulatedSlowdownTest, BlockComputeTakesTheFactorLongerWithTheSameOutputs) {
  const std::string file = TempPath("factor");
  ThreadCpuClock clock;
  absl::StatusOr<Rank> rank = OneRank(file, &clock);
  ASSERT_TRUE(rank.ok()) << rank.status();
  MlpConfig config;
  config.id = BlockId(0);
  config.hidden = 256;
  config.intermediate = 1024;
  config.unit_size = 64;
  absl::StatusOr<std::unique_ptr<ParallelMlp>> mlp = ParallelMlp::Create(rank->group.get(), config);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  Compute& c = rank->backend->compute();
  constexpr int kBatch = 4, kSeq = 64;
  const size_t n = static_cast<size_t>(kBatch) * kSeq * config.hidden;
  absl::StatusOr<Buffer> x = c.Allocate(n), y = c.Allocate(n), dx = c.Allocate(n);
  ASSERT_TRUE(x.ok() && y.ok() && dx.ok());
  std::vector<float> input(n);
  for (size_t i = 0; i < n; ++i) input[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  c.CopyFromHost(input.data(), x->data(), n);

  // Forward and Backward, no optimizer step: the weights, and so the outputs, stay put.
  auto run_step = [&]() -> absl::StatusOr<Step> {
    BALLAST_RETURN_IF_ERROR(rank->group->BeginStep());
    BALLAST_RETURN_IF_ERROR((*mlp)->Forward(x->data(), kBatch, kSeq, y->data()));
    BALLAST_RETURN_IF_ERROR((*mlp)->Backward(y->data(), dx->data()));
    BALLAST_RETURN_IF_ERROR(rank->group->EndStep());
    return Step{.compute_seconds = rank->group->last_step_timings().compute_seconds(),
                .y = testing::ToHost(c, y->data(), n),
                .dx = testing::ToHost(c, dx->data(), n)};
  };
  // The median, over `pairs` pairs of steps, of a step's compute seconds with the file
  // reading `factor` ("" = no file) over the step before's with it reading "1". Pairs of
  // neighbouring steps: this machine's CPU time for the same GEMMs drifts by tens of
  // percent over a second (other tenants), much less from one step to the next. The group
  // re-reads the file at BeginStep, so each step runs at the factor written before it.
  std::vector<float> want_y, want_dx;
  auto timed_step = [&](const std::string& factor) -> double {
    if (factor.empty()) {
      std::remove(file.c_str());
    } else {
      WriteFile(file, factor);
    }
    absl::StatusOr<Step> step = run_step();
    EXPECT_TRUE(step.ok()) << "factor \"" << factor << "\": " << step.status();
    if (!step.ok()) return 0;
    if (want_y.empty()) {
      want_y = step->y;
      want_dx = step->dx;
    } else {
      EXPECT_EQ(step->y, want_y) << "factor \"" << factor << "\": the output changed";
      EXPECT_EQ(step->dx, want_dx) << "factor \"" << factor << "\": the input gradient changed";
    }
    return step->compute_seconds;
  };
  auto ratio = [&](const std::string& factor) -> double {
    constexpr int kPairs = 9;
    std::vector<double> ratios;
    for (int i = 0; i < kPairs; ++i) {
      const double base = timed_step("1");
      ratios.push_back(timed_step(factor) / base);
    }
    std::sort(ratios.begin(), ratios.end());
    return ratios[ratios.size() / 2];
  };

  ASSERT_TRUE(run_step().ok());  // allocates its buffers: not timed
  const double twice = ratio("2\n");
  const double three_and_a_half = ratio("3.5");
  const double none = ratio("");
  std::fprintf(stderr,
               "compute seconds over the step before's at 1x: 2x %.2f, 3.5x %.2f, "
               "no file %.2f\n",
               twice, three_and_a_half, none);
  std::remove(file.c_str());
  EXPECT_THAT(twice, ::testing::AllOf(::testing::Gt(1.5), ::testing::Lt(2.8)));
  EXPECT_THAT(three_and_a_half, ::testing::AllOf(::testing::Gt(2.6), ::testing::Lt(4.8)));
  EXPECT_THAT(none, ::testing::AllOf(::testing::Gt(0.7), ::testing::Lt(1.4)));
}

TEST(EmulatedSlowdownTest, ParsesOneNumberInRange) {
  using internal::EmulatedSlowdown;
  for (const auto& [text, want] : std::vector<std::pair<std::string, double>>{
           {"1", 1.0}, {"2", 2.0}, {" 2.5\n", 2.5}, {"16", 16.0}}) {
    absl::StatusOr<double> got = EmulatedSlowdown::ParseFactor(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(*got, want) << text;
  }
  for (const std::string text : {"", "\n", "two", "2x", "nan", "inf", "0.5", "0", "-2", "17"}) {
    absl::StatusOr<double> got = EmulatedSlowdown::ParseFactor(text);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << text << "\"";
  }
}

// A factor and the step it takes effect from: what a launcher that learns of each step
// once the ranks have begun it writes a step ahead.
TEST(EmulatedSlowdownTest, ParsesAFactorAndTheStepItTakesEffectFrom) {
  using internal::EmulatedSlowdown;
  for (const auto& [text, factor, from] : std::vector<std::tuple<std::string, double, int64_t>>{
           {"3", 3.0, 0}, {"2@150", 2.0, 150}, {" 2.5 @ 0\n", 2.5, 0}, {"1@7", 1.0, 7}}) {
    absl::StatusOr<EmulatedSlowdown::Setting> got = EmulatedSlowdown::ParseSetting(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(got->factor, factor) << text;
    EXPECT_EQ(got->from_step, from) << text;
  }
  for (const std::string text : {"@5", "2@", "2@-1", "2@1.5", "2@x", "17@5", "2@5@6"}) {
    absl::StatusOr<EmulatedSlowdown::Setting> got = EmulatedSlowdown::ParseSetting(text);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << text << "\"";
  }
  EXPECT_THAT(EmulatedSlowdown::ParseSetting("2@x").status().message(),
              ::testing::HasSubstr("\"x\" after '@' is not a step"));
}

// A setting for a later step leaves the factor in force until that step's Refresh.
TEST(EmulatedSlowdownTest, ASettingForALaterStepTakesEffectAtThatStep) {
  const std::string file = TempPath("from");
  internal::EmulatedSlowdown slowdown(file, "test");
  WriteFile(file, "3@7");
  slowdown.Refresh(6);
  EXPECT_EQ(slowdown.factor(), 1.0) << "not before step 7";
  slowdown.Refresh(7);
  EXPECT_EQ(slowdown.factor(), 3.0);
  WriteFile(file, "1@9");
  slowdown.Refresh(8);
  EXPECT_EQ(slowdown.factor(), 3.0) << "3 holds until step 9";
  slowdown.Refresh(9);
  EXPECT_EQ(slowdown.factor(), 1.0);
  WriteFile(file, "2@4");
  slowdown.Refresh(10);
  EXPECT_EQ(slowdown.factor(), 2.0) << "a step already passed: at once";
  std::remove(file.c_str());
}

// A missing file is full speed; bad content is full speed too (logged, not fatal), until
// the file is good again.
TEST(EmulatedSlowdownTest, FollowsTheFileAndRunsAtFullSpeedOnBadContent) {
  const std::string file = TempPath("follow");
  internal::EmulatedSlowdown slowdown(file, "test");
  slowdown.Refresh(0);
  EXPECT_EQ(slowdown.factor(), 1.0) << "no file yet";
  WriteFile(file, "3");
  slowdown.Refresh(1);
  EXPECT_EQ(slowdown.factor(), 3.0);
  WriteFile(file, "fast please");
  slowdown.Refresh(2);
  EXPECT_EQ(slowdown.factor(), 1.0) << "unparsable: full speed";
  slowdown.Refresh(3);
  EXPECT_EQ(slowdown.factor(), 1.0);
  WriteFile(file, "2");
  slowdown.Refresh(4);
  EXPECT_EQ(slowdown.factor(), 2.0);
  std::remove(file.c_str());
  slowdown.Refresh(5);
  EXPECT_EQ(slowdown.factor(), 1.0) << "removed: full speed";
}

// A backend that is the CPU backend but names itself otherwise, as the CUDA backends do.
class RenamedBackend final : public Backend {
 public:
  RenamedBackend(std::unique_ptr<Backend> inner, const char* name)
      : inner_(std::move(inner)), name_(name) {}
  Compute& compute() override { return inner_->compute(); }
  Communicator& comm() override { return inner_->comm(); }
  const char* name() const override { return name_; }

 private:
  std::unique_ptr<Backend> inner_;
  const char* name_;
};

TEST(EmulatedSlowdownTest, RefusedOffTheCpuBackendAlsoWhenNamedByTheEnvironment) {
  CpuBackendOptions options;
  options.prefix = absl::StrCat("slowdown-cuda-", getpid());
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  RenamedBackend cuda(*std::move(cpu), "cuda");

  absl::StatusOr<std::unique_ptr<TpGroup>> group = TpGroup::Create(
      {.group = GroupId("test/tp"), .emulated_slowdown_file = TempPath("cuda")}, &cuda);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.status().message(), HasSubstr("does not slow a GPU"));

  ASSERT_EQ(setenv(internal::kEmulatedSlowdownFileEnv, TempPath("env").c_str(), 1), 0);
  group = TpGroup::Create({.group = GroupId("test/tp")}, &cuda);
  unsetenv(internal::kEmulatedSlowdownFileEnv);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.status().message(), HasSubstr(internal::kEmulatedSlowdownFileEnv));

  group = TpGroup::Create({.group = GroupId("test/tp")}, &cuda);
  EXPECT_TRUE(group.ok()) << "no file, no emulation: " << group.status();
}

}  // namespace
}  // namespace ballast
