// StagedCommunicator on real ranks (threads, real Gloo) with a staging whose "device
// memory" is host memory the test marks as such and whose copies run only at the next
// Wait, as copies queued on a CUDA stream would: results must be queued, not waited for,
// host buffers must pass through untouched, and every collective must come out right.
// The same communicator over CUDA's pinned copies is what several CUDA ranks on one GPU
// use (worker_lib/cuda/cuda_host_staging.cc; tests/worker_lib/parallel_*_test.cc run the
// blocks on both).
#include "worker_lib/internal/staged_communicator.h"

#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ballast/communicator.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/rank_threads.h"

namespace ballast::internal {
namespace {

using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::testing::ElementsAre;

// Forwards to a communicator it does not own (the rank's backend's).
class Borrowed final : public Communicator {
 public:
  explicit Borrowed(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  absl::Status AllReduceSum(float* d, size_t n) override { return inner_.AllReduceSum(d, n); }
  absl::Status AllReduceMin(int64_t* d, size_t n) override { return inner_.AllReduceMin(d, n); }
  absl::Status Broadcast(float* d, size_t n, int root) override {
    return inner_.Broadcast(d, n, root);
  }
  absl::Status Reduce(float* d, size_t n, int root) override { return inner_.Reduce(d, n, root); }
  absl::Status AllGather(const float* in, size_t n, float* out) override {
    return inner_.AllGather(in, n, out);
  }
  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override {
    return inner_.Exchange(sends, recvs);
  }

 private:
  Communicator& inner_;
};

// "Device" memory is whatever the test registers; copies wait in a queue until Wait.
class DeferredStaging final : public HostStaging {
 public:
  void Register(const std::vector<float>& memory) {
    ranges_.push_back({reinterpret_cast<const char*>(memory.data()),
                       reinterpret_cast<const char*>(memory.data() + memory.size())});
  }
  absl::StatusOr<bool> IsBackendMemory(const void* ptr) override {
    const char* p = static_cast<const char*>(ptr);
    for (const auto& [begin, end] : ranges_) {
      if (p >= begin && p < end) return true;
    }
    return false;
  }
  absl::StatusOr<char*> HostMemory(size_t bytes) override {
    if (bytes > host_.size()) {
      // Queued copies may still use the old memory.
      if (!queued_.empty()) BALLAST_RETURN_IF_ERROR(Wait());
      host_.assign(bytes, 0);
    }
    return host_.data();
  }
  absl::Status QueueToHost(const void* src, void* dst, size_t bytes) override {
    queued_.push_back([=] { std::memcpy(dst, src, bytes); });
    return absl::OkStatus();
  }
  absl::Status QueueToBackend(const void* src, void* dst, size_t bytes) override {
    queued_.push_back([=] { std::memcpy(dst, src, bytes); });
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    for (auto& copy : queued_) copy();
    queued_.clear();
    ++waits_;
    return absl::OkStatus();
  }
  size_t queued() const { return queued_.size(); }
  int waits() const { return waits_; }

 private:
  std::vector<std::pair<const char*, const char*>> ranges_;
  std::vector<char> host_;
  std::vector<std::function<void()>> queued_;
  int waits_ = 0;
};

struct Staged {
  DeferredStaging* staging;
  std::unique_ptr<StagedCommunicator> comm;
};

absl::StatusOr<Staged> Stage(RankContext& ctx) {
  auto staging = std::make_unique<DeferredStaging>();
  DeferredStaging* raw = staging.get();
  BALLAST_ASSIGN_OR_RETURN(
      auto comm, StagedCommunicator::Create(std::make_unique<Borrowed>(ctx.backend->comm()),
                                            std::move(staging)));
  return Staged{raw, std::move(comm)};
}

TEST(StagedCommunicatorTest, ResultsAreQueuedAndLandAtTheNextWait) {
  ASSERT_TRUE(RunRanks(2, [](RankContext& ctx) -> absl::Status {
                BALLAST_ASSIGN_OR_RETURN(Staged s, Stage(ctx));
                std::vector<float> device = {1.0f + ctx.rank, 10.0f * (ctx.rank + 1)};
                s.staging->Register(device);
                BALLAST_RETURN_IF_ERROR(s.comm->AllReduceSum(device.data(), device.size()));
                // One wait (the inputs), then the result is queued, not yet copied back.
                EXPECT_EQ(s.staging->waits(), 1);
                EXPECT_EQ(s.staging->queued(), 1u);
                EXPECT_THAT(device, ElementsAre(1.0f + ctx.rank, 10.0f * (ctx.rank + 1)));
                BALLAST_RETURN_IF_ERROR(s.staging->Wait());
                EXPECT_THAT(device, ElementsAre(3.0f, 30.0f));
                EXPECT_EQ(s.comm->staged_bytes(), 2 * 2 * static_cast<int64_t>(sizeof(float)));
                return absl::OkStatus();
              }).ok());
}

TEST(StagedCommunicatorTest, HostBuffersPassThroughWithoutCopiesOrWaits) {
  ASSERT_TRUE(RunRanks(3, [](RankContext& ctx) -> absl::Status {
                BALLAST_ASSIGN_OR_RETURN(Staged s, Stage(ctx));
                int64_t versions[2] = {5 - ctx.rank, 7 + ctx.rank};
                BALLAST_RETURN_IF_ERROR(s.comm->AllReduceMin(versions, 2));
                EXPECT_EQ(versions[0], 3);
                EXPECT_EQ(versions[1], 7);
                std::vector<float> host = {1.0f * ctx.rank};
                BALLAST_RETURN_IF_ERROR(s.comm->AllReduceSum(host.data(), 1));
                EXPECT_EQ(host[0], 3.0f);
                EXPECT_EQ(s.comm->staged_bytes(), 0);
                EXPECT_EQ(s.staging->waits(), 0);
                return absl::OkStatus();
              }).ok());
}

// Every collective, with device and host buffers mixed, on three ranks; the staging memory
// grows between calls while copies are still queued.
TEST(StagedCommunicatorTest, EveryCollectiveComesOutRightMixingDeviceAndHostBuffers) {
  ASSERT_TRUE(
      RunRanks(3, [](RankContext& ctx) -> absl::Status {
        const int me = ctx.rank;
        BALLAST_ASSIGN_OR_RETURN(Staged s, Stage(ctx));
        std::vector<float> small(2), large(64), gathered(3 * 2);
        s.staging->Register(small);
        s.staging->Register(large);
        // Broadcast from rank 1 into device memory.
        small = {100.0f + me, 200.0f + me};
        BALLAST_RETURN_IF_ERROR(s.comm->Broadcast(small.data(), 2, 1));
        // Reduce to rank 2, a bigger device buffer: the staging memory grows while the
        // broadcast's result is still queued.
        for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i + me);
        BALLAST_RETURN_IF_ERROR(s.comm->Reduce(large.data(), large.size(), 2));
        BALLAST_RETURN_IF_ERROR(s.staging->Wait());
        EXPECT_THAT(small, ElementsAre(101.0f, 201.0f));
        if (me == 2) {
          for (size_t i = 0; i < large.size(); ++i) EXPECT_EQ(large[i], 3.0f * i + 3.0f) << i;
        }
        // AllGather: device input, host output (filled when the call returns).
        small = {1.0f * me, -1.0f * me};
        BALLAST_RETURN_IF_ERROR(s.comm->AllGather(small.data(), 2, gathered.data()));
        EXPECT_THAT(gathered, ElementsAre(0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f));
        // Exchange in a ring: device sends, a host receive and a device receive.
        const int next = (me + 1) % 3, prev = (me + 2) % 3;
        std::vector<float> out = {10.0f * me, 10.0f * me + 1};
        s.staging->Register(out);
        std::vector<float> in_host(1), in_device(1);
        s.staging->Register(in_device);
        const PeerTransfer sends[] = {{next, out.data(), 1}, {next, out.data() + 1, 1}};
        const PeerTransfer recvs[] = {{prev, in_host.data(), 1}, {prev, in_device.data(), 1}};
        BALLAST_RETURN_IF_ERROR(s.comm->Exchange(sends, recvs));
        EXPECT_EQ(in_host[0], 10.0f * prev);
        BALLAST_RETURN_IF_ERROR(s.staging->Wait());
        EXPECT_EQ(in_device[0], 10.0f * prev + 1);
        return absl::OkStatus();
      }).ok());
}

}  // namespace
}  // namespace ballast::internal
