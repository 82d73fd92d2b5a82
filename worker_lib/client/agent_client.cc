#include "ballast/agent_client.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ballast/v1/worker.grpc.pb.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/logging.h"
#include "proto/convert.h"

namespace ballast {
namespace {

// Durations in log lines, to the millisecond ("1.234s", not "1.23456789s").
std::string ForLog(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

class AgentClientImpl final : public AgentClient {
 public:
  AgentClientImpl(const AgentClientOptions& options, TpGroup* group)
      : options_(options),
        group_(group),
        clock_(options.clock != nullptr ? options.clock : RealClock()),
        backoff_({.initial = options.initial_backoff, .max = options.max_backoff}, clock_) {
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
    AgentClientStats stats = stats_;
    stats.backing_off = backing_off_ && clock_->Monotonic() < retry_at_;
    return stats;
  }

 private:
  void Run() {
    for (;;) {
      const grpc::Status status = Attach();
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      const bool lost_session = stats_.established;
      stats_.established = false;
      const absl::Duration delay = backoff_.NextDelay();
      LogFailedAttempt(status, lost_session, delay);
      backing_off_ = true;
      retry_at_ = clock_->Monotonic() + delay;
      const bool go_on = WaitUnlessStopped(clock_, delay, mu_, stopping_);
      backing_off_ = false;
      if (!go_on) return;
    }
  }

  std::string Who() const {
    return absl::StrCat("group=", group_->group().value(), " rank=", group_->rank().value());
  }

  // The agent acknowledged this attach: log a reattach, start the backoff over.
  void MarkEstablished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stats_.established) return;
    stats_.established = true;
    if (backoff_.attempts() > 0) {
      const std::string outage = ForLog(backoff_.outage());
      BALLAST_LOG(INFO) << Who() << (attached_before_ ? " reattached" : " attached")
                        << " to the agent at " << options_.socket_path << " after "
                        << backoff_.attempts()
                        << (backoff_.attempts() == 1 ? " attempt, " : " attempts, ") << outage;
    }
    backoff_.Reset();
    attached_before_ = true;
  }

  // After a stream ended: the one line this attempt may log (see the header).
  void LogFailedAttempt(const grpc::Status& status, bool lost_session, absl::Duration delay)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string next = ForLog(delay);
    const std::string outage = ForLog(backoff_.outage());
    const std::string why =
        status.ok()
            ? std::string("the stream ended before the agent acknowledged the attach")
            : absl::StrCat(
                  absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                  ": ", status.error_message());
    if (lost_session) {
      BALLAST_LOG(WARNING) << Who() << " lost the agent at " << options_.socket_path << ": " << why
                           << "; training continues on plan v" << group_->applied_version()
                           << ", next attempt in " << next;
    } else if (backoff_.attempts() == 1) {
      BALLAST_LOG(WARNING) << Who() << " cannot attach to the agent at " << options_.socket_path
                           << ": " << why << "; retrying with backoff (next attempt in " << next
                           << ")";
    } else if (backoff_.ShouldLogAttempt()) {
      BALLAST_LOG(WARNING) << Who() << " agent at " << options_.socket_path
                           << " still unreachable after " << backoff_.attempts() << " attempts in "
                           << outage << ": " << why << "; next attempt in " << next;
    }
  }

  // One attach, from the stream's creation to its end; returns its final status.
  grpc::Status Attach() {
    grpc::ChannelArguments args;
    // A channel of its own per attempt: gRPC's shared subchannels keep their own reconnect
    // backoff (up to 120 s); this client's backoff is the only one.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(absl::StrCat("unix:", options_.socket_path),
                                             grpc::InsecureChannelCredentials(), args);
    auto stub = v1::WorkerAgent::NewStub(channel);
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_wait_for_ready(false);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return grpc::Status::CANCELLED;
      context_ = context.get();
      ++stats_.attempts;
    }
    const absl::Duration opened_at = clock_->Monotonic();
    auto stream = stub->Attach(context.get());
    v1::WorkerMessage hello;
    *hello.mutable_hello() = Hello();
    bool ok = stream->Write(hello);
    bool cancel = true;  // on the way out: stopping, or a write failed
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
        if (reader_done_ && !stopping_) {
          cancel = false;  // the agent ended the stream: keep its status for the log
          break;
        }
        if (stopping_) break;
        batch.swap(queue_);
      }
      // An agent older than the Welcome message says nothing after an accepted hello: an
      // attach it kept open this long on a connected channel is one it accepted (a refusal
      // ends it at once). Current agents answer, and the reader marks it.
      if (clock_->Monotonic() - opened_at >= options_.established_after &&
          channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
        absl::MutexLock lock(&mu_);
        MarkEstablished();
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
    if (cancel) context->TryCancel();
    if (reader.joinable()) reader.join();
    grpc::Status status = stream->Finish();
    absl::MutexLock lock(&mu_);
    stats_.connected = false;
    reader_done_ = false;
    context_ = nullptr;
    return status;
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
      info->set_units_divide(b.units_divide);
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
    bool acknowledged = false;
    while (stream->Read(&directive)) {
      if (!acknowledged) {
        acknowledged = true;
        absl::MutexLock lock(&mu_);
        MarkEstablished();
      }
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
  Clock* const clock_;
  std::map<int32_t, int64_t> unit_bytes_;  // per block; fixed at start

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Backoff backoff_ ABSL_GUARDED_BY(mu_);
  bool backing_off_ ABSL_GUARDED_BY(mu_) = false;
  bool attached_before_ ABSL_GUARDED_BY(mu_) = false;  // any attach acknowledged yet
  absl::Duration retry_at_ ABSL_GUARDED_BY(mu_);       // clock_->Monotonic() of the next attempt
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
  if (absl::Status s =
          ValidateBackoffOptions({.initial = options.initial_backoff, .max = options.max_backoff});
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<AgentClient>(new AgentClientImpl(options, group));
}

}  // namespace ballast
