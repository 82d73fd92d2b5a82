#include "ballast/agent_client.h"

#include <grpcpp/grpcpp.h>

#include <deque>
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
    // The group's shape at start: every block's units and ownership.
    hello_.set_job(options_.job);
    hello_.set_group(group_->group().value());
    hello_.set_rank(group_->rank().value());
    hello_.set_group_size(group_->size());
    hello_.set_device(options_.device);
    hello_.set_node(options_.node);
    for (const BlockShape& b : group_->Shape().blocks) {
      v1::BlockInfo* info = hello_.add_blocks();
      info->set_block(b.block.value());
      info->set_num_units(b.num_units);
      for (RankId r : b.owner_of_unit) info->add_owner_of_unit(r.value());
      if (ParallelBlock* block = group_->FindBlock(b.block)) {
        info->set_unit_bytes(static_cast<int64_t>(block->unit_bytes()));
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
      // Full jitter: sleep a uniform fraction of the backoff, so workers of a restarted
      // agent do not reconnect in lockstep.
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
    *hello.mutable_hello() = hello_;
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
  v1::WorkerIdentity hello_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<StepTimings> queue_ ABSL_GUARDED_BY(mu_);
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
