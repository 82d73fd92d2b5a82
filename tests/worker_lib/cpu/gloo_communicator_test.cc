// The Gloo communicator (worker_lib/cpu/gloo_communicator.cc) on real ranks (threads,
// loopback TCP): every collective, the all-reduce's exactness and bitwise agreement, teardown.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ballast/backend.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, AllCollectives) {
  const int p = GetParam();
  absl::Status status = RunRanks(p, [p](RankContext& ctx) -> absl::Status {
    Communicator& comm = ctx.backend->comm();
    const int r = ctx.rank;
    std::vector<float> sum = {float(r), float(2 * r + 1)};
    BALLAST_RETURN_IF_ERROR(comm.AllReduceSum(sum.data(), sum.size()));
    const float s = p * (p - 1) / 2.0f;
    if (sum[0] != s || sum[1] != 2 * s + p) return absl::InternalError("allreduce sum wrong");

    std::vector<int64_t> mins = {100 - r, r};
    BALLAST_RETURN_IF_ERROR(comm.AllReduceMin(mins.data(), mins.size()));
    if (mins[0] != 100 - (p - 1) || mins[1] != 0) return absl::InternalError("allreduce min");

    std::vector<float> bcast = {float(r * 10)};
    BALLAST_RETURN_IF_ERROR(comm.Broadcast(bcast.data(), 1, p - 1));
    if (bcast[0] != (p - 1) * 10) return absl::InternalError("broadcast wrong");

    std::vector<float> red = {1.0f};
    BALLAST_RETURN_IF_ERROR(comm.Reduce(red.data(), 1, 0));
    if (r == 0 && red[0] != p) return absl::InternalError("reduce wrong");

    std::vector<float> in = {float(r), float(-r)}, out(2 * p);
    BALLAST_RETURN_IF_ERROR(comm.AllGather(in.data(), 2, out.data()));
    for (int q = 0; q < p; ++q) {
      if (out[2 * q] != q || out[2 * q + 1] != -q) return absl::InternalError("allgather wrong");
    }

    // Ring exchange with two messages per pair, listed in the same order on both sides.
    if (p > 1) {
      const int next = (r + 1) % p, prev = (r + p - 1) % p;
      std::vector<float> a = {float(r)}, b = {float(r + 100), float(r + 200)};
      std::vector<float> ra(1), rb(2);
      std::vector<PeerTransfer> sends = {{next, a.data(), 1}, {next, b.data(), 2}};
      std::vector<PeerTransfer> recvs = {{prev, ra.data(), 1}, {prev, rb.data(), 2}};
      BALLAST_RETURN_IF_ERROR(comm.Exchange(sends, recvs));
      if (ra[0] != prev || rb[0] != prev + 100 || rb[1] != prev + 200) {
        return absl::InternalError("exchange wrong");
      }
    }
    // An exchange with nothing to do is still a valid collective call.
    return comm.Exchange({}, {});
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooCollectivesTest, ::testing::Values(1, 2, 3, 4));

// The all-reduce is Ballast's own (a swap for two ranks, a ring beyond): every size,
// including fewer elements than ranks, sums exactly, and every rank ends with bitwise the
// same floats, or the replicated layers of a TP model would drift apart.
class GlooAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooAllReduceTest, EverySizeIsExactAndBitwiseAlikeOnAllRanks) {
  const int p = GetParam();
  absl::Status status = RunRanks(p, [p](RankContext& ctx) -> absl::Status {
    Communicator& comm = ctx.backend->comm();
    const int r = ctx.rank;
    for (size_t n :
         {size_t{1}, size_t(p - 1), size_t(p), size_t(p + 1), size_t{1000}, size_t{196608}}) {
      if (n == 0) continue;
      // Small integers: the sum is exact whatever the order.
      std::vector<float> ints(n);
      for (size_t i = 0; i < n; ++i) ints[i] = float((i % 7) * (r + 1));
      BALLAST_RETURN_IF_ERROR(comm.AllReduceSum(ints.data(), n));
      for (size_t i = 0; i < n; ++i) {
        if (ints[i] != float((i % 7) * p * (p + 1) / 2)) {
          return absl::InternalError(absl::StrCat("n ", n, " element ", i, " = ", ints[i]));
        }
      }
      // Values whose sum rounds: ranks must still agree bit for bit. Agreement is checked
      // with two min-reduces of a checksum (min == max).
      std::vector<float> reals(n);
      for (size_t i = 0; i < n; ++i) reals[i] = 1.0f / float(3 + i + 7 * r);
      BALLAST_RETURN_IF_ERROR(comm.AllReduceSum(reals.data(), n));
      uint64_t hash = 0;  // unsigned: wraps by definition
      for (float v : reals) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof(bits));
        hash = hash * 31 + bits;
      }
      const int64_t checksum = static_cast<int64_t>(hash >> 1);  // >= 0, so -checksum fits
      std::vector<int64_t> extremes = {checksum, -checksum};
      BALLAST_RETURN_IF_ERROR(comm.AllReduceMin(extremes.data(), 2));
      if (extremes[0] != -extremes[1]) {
        return absl::InternalError(absl::StrCat("n ", n, ": ranks disagree on the sum"));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Ranks that tear down as soon as their last all-reduce returns must not break a peer
// still finishing it (Gloo's older algorithms return before their last send has left).
TEST_P(GlooAllReduceTest, RanksMayLeaveRightAfterTheLastCall) {
  const int p = GetParam();
  for (int round = 0; round < 10; ++round) {
    absl::Status status = RunRanks(p, [p](RankContext& ctx) -> absl::Status {
      std::vector<float> x(4096, 1.0f);
      BALLAST_RETURN_IF_ERROR(ctx.backend->comm().AllReduceSum(x.data(), x.size()));
      return x[4095] == float(p) ? absl::OkStatus() : absl::InternalError("wrong sum");
    });
    ASSERT_TRUE(status.ok()) << "round " << round << ": " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooAllReduceTest, ::testing::Values(2, 3, 5));

TEST(GlooCommunicatorTest, BadArgumentsAreErrors) {
  absl::Status status = RunRanks(2, [](RankContext& ctx) -> absl::Status {
    Communicator& comm = ctx.backend->comm();
    std::vector<float> x(1);
    if (comm.Broadcast(x.data(), 1, 5).code() != absl::StatusCode::kInvalidArgument) {
      return absl::InternalError("broadcast root not rejected");
    }
    PeerTransfer self{ctx.rank, x.data(), 1};
    if (comm.Exchange({&self, 1}, {}).code() != absl::StatusCode::kInvalidArgument) {
      return absl::InternalError("send to self not rejected");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace ballast
