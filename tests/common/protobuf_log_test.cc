// libprotobuf's log lines, rate-limited (common/protobuf_log.h): the limiter on a fake
// clock, and a real loopback coordinator flooded with requests that carry invalid UTF-8,
// whose log stays bounded.
#include "common/protobuf_log.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "testing/control_plane.h"
#include "testing/fake_clock.h"

namespace ballast {
namespace {

TEST(LogRateLimiterTest, ForwardsAtMostNAWindowAndCountsTheRest) {
  testing::FakeClock clock;
  LogRateLimiter limiter(&clock, 3, absl::Minutes(1));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Admit(), 0) << i;
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(limiter.Admit().has_value()) << i;
  clock.Advance(absl::Seconds(59));
  EXPECT_FALSE(limiter.Admit().has_value());
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(limiter.Admit(), 8);  // the first line of the next window says what was lost
  EXPECT_EQ(limiter.Admit(), 0);
  EXPECT_EQ(limiter.forwarded(), 5);
  EXPECT_EQ(limiter.suppressed(), 8);
}

TEST(ProtobufLogTest, RequestsWithInvalidUtf8LeaveABoundedLog) {
  constexpr int kMaxLines = 5;
  const LogRateLimiter& limiter = RateLimitProtobufLogs(kMaxLines, absl::Minutes(10));
  const std::string dir = absl::StrCat(::testing::TempDir(), "/ballast-pblog-", ::getpid());
  std::filesystem::create_directories(dir);
  testing::InProcessCoordinator coordinator({.store_path = dir + "/c.db"});
  ASSERT_TRUE(coordinator.Start().ok());
  auto admin = v1::Admin::NewStub(
      grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials()));

  constexpr int kRequests = 200;
  ::testing::internal::CaptureStderr();
  int refused = 0;
  for (int i = 0; i < kRequests; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetStatusRequest request;
    request.set_job(std::string("vit\xff\xfe", 5));  // not UTF-8: protobuf logs on both ends
    v1::ClusterStatus reply;
    const grpc::Status status = admin->GetStatus(&context, request, &reply);
    refused += status.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused, kRequests);
  int protobuf_lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    protobuf_lines += absl::StrContains(line, "UTF-8");
  }
  // Every request made a line at the client's serialisation and one at the server's
  // parse: 400 unlimited. At most kMaxLines got through.
  EXPECT_LE(protobuf_lines, kMaxLines) << log.substr(0, 2000);
  EXPECT_GE(limiter.suppressed(), kRequests);
  EXPECT_THAT(log, ::testing::HasSubstr("libprotobuf: "));
  coordinator.Stop();
}

}  // namespace
}  // namespace ballast
