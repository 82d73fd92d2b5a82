#include "ballast/agent_client.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ballast/v1/worker.grpc.pb.h"
#include "common/logging.h"
#include "proto/convert.h"

namespace ballast {
namespace {

class AgentClientImpl final : public AgentClient {
 public:
  AgentClientImpl(const AgentClientOptions& options, TpGroup* group)
      : options_(options), group_(group) {
    for (const BlockShape& b : group_->ShapeSnapshot().blocks) {
      if (ParallelBlock* block = group_->FindBlock(b.block)) {
        unit_bytes_[b.block.value()] = static_cast<int64_t>(block->unit_bytes());
      }
    }
    thread_ = std::thread([this] { Run(); });
  }

  ~AgentClientImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    thread_.join();
  }

  void Report(const StepTimings& timings) override {
    absl::MutexLock lock(&mu_);
    if (timings.plan_version != last_plan_version_) {
      // Only a new plan can reshard; look at ownership then, not every step.
      last_plan_version_ = timings.plan_version;
      ownership_dirty_ = true;
    }
    if (static_cast<int32_t>(queue_.size()) >= options_.queue_capacity) {
      queue_.pop_front();  // the newest timings are the useful ones
      ++stats_.reports_dropped;
    }
    queue_.push_back(timings);
  }

  AgentClientStats stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  void Run() {
    std::mt19937_64 rng(std::random_device{}());
    absl::Duration backoff = options_.initial_backoff;
    while (!Stopping()) {
      const bool attached = Attach();
      if (Stopping()) break;
      if (attached) backoff = options_.initial_backoff;
      // Equal jitter: sleep between half and all of the backoff, so the workers of a
      // restarted agent do not reconnect in lockstep, yet never retry at once.
      const double fraction = std::uniform_real_distribution<double>(0.5, 1.0)(rng);
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff * fraction);
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }

  // One attach: returns whether the stream was established.
  bool Attach() {
    auto channel = grpc::CreateChannel(absl::StrCat("unix:", options_.socket_path),
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::WorkerAgent::NewStub(channel);
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_wait_for_ready(false);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return false;
      context_ = context.get();
    }
    auto stream = stub->Attach(context.get());
    v1::WorkerMessage hello;
    *hello.mutable_hello() = Hello();
    bool ok = stream->Write(hello);
    if (ok) {
      absl::MutexLock lock(&mu_);
      ++stats_.connects;
      stats_.connected = true;
    }
    std::thread reader;
    if (ok) reader = std::thread([&] { ReadDirectives(stream.get()); });
    while (ok) {
      std::deque<StepTimings> batch;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this] { return stopping_ || !queue_.empty() || reader_done_; };
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
        if (stopping_ || reader_done_) break;
        batch.swap(queue_);
      }
      for (const StepTimings& t : batch) {
        v1::WorkerMessage msg;
        *msg.mutable_report() = ToProto(t);
        AttachOwnershipIfChanged(*msg.mutable_report());
        if (!stream->Write(msg)) {
          ok = false;
          break;
        }
        absl::MutexLock lock(&mu_);
        ++stats_.reports_sent;
      }
    }
    context->TryCancel();
    if (reader.joinable()) reader.join();
    grpc::Status status = stream->Finish();
    absl::MutexLock lock(&mu_);
    const bool was_connected = stats_.connected;
    stats_.connected = false;
    reader_done_ = false;
    context_ = nullptr;
    if (was_connected && !stopping_) {
      BALLAST_LOG(WARNING) << "group=" << group_->group() << " rank=" << group_->rank()
                           << " lost the agent at " << options_.socket_path << ": "
                           << status.error_message() << "; training continues on plan v"
                           << group_->applied_version();
    }
    return was_connected;
  }

  // This worker's identity, with every block's ownership as of the last step boundary.
  v1::WorkerIdentity Hello() {
    v1::WorkerIdentity hello;
    hello.set_job(options_.job);
    hello.set_group(group_->group().value());
    hello.set_rank(group_->rank().value());
    hello.set_group_size(group_->size());
    hello.set_device(options_.device);
    hello.set_node(options_.node);
    const GroupShape shape = group_->ShapeSnapshot();
    for (const BlockShape& b : shape.blocks) {
      v1::BlockInfo* info = hello.add_blocks();
      info->set_block(b.block.value());
      info->set_num_units(b.num_units);
      for (RankId r : b.owner_of_unit) info->add_owner_of_unit(r.value());
      if (auto it = unit_bytes_.find(b.block.value()); it != unit_bytes_.end()) {
        info->set_unit_bytes(it->second);
      }
    }
    absl::MutexLock lock(&mu_);
    announced_.clear();
    for (const BlockShape& b : shape.blocks) announced_[b.block.value()] = b.owner_of_unit;
    return hello;
  }

  // After a reshard, the next report carries the new ownership of the blocks it changed.
  void AttachOwnershipIfChanged(v1::StepReport& report) {
    {
      absl::MutexLock lock(&mu_);
      if (!ownership_dirty_) return;
      ownership_dirty_ = false;
    }
    const GroupShape shape = group_->ShapeSnapshot();
    absl::MutexLock lock(&mu_);
    for (const BlockShape& b : shape.blocks) {
      std::vector<RankId>& known = announced_[b.block.value()];
      if (known == b.owner_of_unit) continue;
      known = b.owner_of_unit;
      for (v1::BlockTiming& timing : *report.mutable_blocks()) {
        if (timing.block() != b.block.value()) continue;
        for (RankId r : b.owner_of_unit) timing.add_owner_of_unit(r.value());
      }
    }
  }

  void ReadDirectives(grpc::ClientReaderWriter<v1::WorkerMessage, v1::WorkerDirective>* stream) {
    v1::WorkerDirective directive;
    while (stream->Read(&directive)) {
      if (!directive.has_plan()) continue;
      absl::StatusOr<WorkloadPlan> plan = FromProto(directive.plan());
      absl::Status status = plan.ok() ? group_->OfferPlan(*std::move(plan)) : plan.status();
      absl::MutexLock lock(&mu_);
      ++stats_.plans_received;
      if (!status.ok()) {
        ++stats_.plans_rejected;
        BALLAST_LOG(WARNING) << "group=" << group_->group() << " rank=" << group_->rank()
                             << " rejected plan: " << status.message();
      }
    }
    absl::MutexLock lock(&mu_);
    reader_done_ = true;
  }

  const AgentClientOptions options_;
  TpGroup* const group_;
  std::map<int32_t, int64_t> unit_bytes_;  // per block; fixed at start

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<StepTimings> queue_ ABSL_GUARDED_BY(mu_);
  // Ownership this stream has announced, per block; and whether it may have changed.
  std::map<int32_t, std::vector<RankId>> announced_ ABSL_GUARDED_BY(mu_);
  PlanVersion last_plan_version_ ABSL_GUARDED_BY(mu_);
  bool ownership_dirty_ ABSL_GUARDED_BY(mu_) = false;
  AgentClientStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AgentClient>> AgentClient::Start(const AgentClientOptions& options,
                                                                TpGroup* group) {
  if (group == nullptr) return absl::InvalidArgumentError("group is null");
  if (options.socket_path.empty()) return absl::InvalidArgumentError("socket_path is empty");
  if (options.job.empty()) return absl::InvalidArgumentError("job is empty");
  if (options.device.empty()) return absl::InvalidArgumentError("device is empty");
  if (options.queue_capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue_capacity ", options.queue_capacity, " must be >= 1"));
  }
  if (options.initial_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.initial_backoff) {
    return absl::InvalidArgumentError("backoff must satisfy 0 < initial_backoff <= max_backoff");
  }
  return std::unique_ptr<AgentClient>(new AgentClientImpl(options, group));
}

}  // namespace ballast
