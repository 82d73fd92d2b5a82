#include "coordinator/coordinator.h"

#include <malloc.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "proto/convert.h"
#include "proto/validate.h"

namespace ballast::coordinator {
namespace {

// Hands the free pages of every malloc arena back to the system.
void ReturnFreedMemory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

Coordinator::Coordinator(const CoordinatorOptions& options, Clock* clock, PolicyStore* store,
                         SpeedModel* speeds)
    : options_(options), clock_(clock), store_(store), speeds_(speeds) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const CoordinatorOptions& options, Clock* clock, PolicyStore* store, SpeedModel* speeds) {
  if (clock == nullptr || store == nullptr || speeds == nullptr) {
    return absl::InvalidArgumentError("clock, store and speed model are required");
  }
  if (!(options.link_bytes_per_second > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("link_bytes_per_second ",
                                                   options.link_bytes_per_second, " must be > 0"));
  }
  if (options.link_stale_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link_stale_after ", absl::FormatDuration(options.link_stale_after), " must be > 0"));
  }
  if (options.max_reports_per_batch < 1) {
    return absl::InvalidArgumentError("max_reports_per_batch must be >= 1");
  }
  if (options.marginal_straggler_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("marginal_straggler_for ",
                     absl::FormatDuration(options.marginal_straggler_for), " must be >= 0"));
  }
  if (options.plan_dwell < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_dwell ", absl::FormatDuration(options.plan_dwell), " must be >= 0"));
  }
  if (!(options.dwell_hysteresis >= 0 && options.dwell_hysteresis <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dwell_hysteresis ", options.dwell_hysteresis, " out of range [0, 1]"));
  }
  if (options.forget_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forget_after ", absl::FormatDuration(options.forget_after), " must be > 0"));
  }
  for (auto [name, cap] : {std::pair<const char*, int32_t>{"max_workers_per_agent",
                                                            options.max_workers_per_agent},
                           {"max_groups_per_agent", options.max_groups_per_agent},
                           {"max_jobs_per_agent", options.max_jobs_per_agent}}) {
    if (cap < 1) return absl::InvalidArgumentError(absl::StrCat(name, " ", cap, " must be >= 1"));
  }
  std::unique_ptr<Coordinator> c(new Coordinator(options, clock, store, speeds));
  BALLAST_RETURN_IF_ERROR(c->LoadFromStore());
  return c;
}

absl::Status Coordinator::LoadFromStore() {
  BALLAST_ASSIGN_OR_RETURN(auto policies, store_->ListPolicies());
  BALLAST_ASSIGN_OR_RETURN(auto paused, store_->ListPaused());
  BALLAST_ASSIGN_OR_RETURN(auto cordons, store_->ListCordons());
  absl::MutexLock lock(&mu_);
  for (auto& [job, policy] : policies) policies_[job] = policy;
  for (const std::string& scope : paused) paused_[scope] = true;
  for (const Cordon& c : cordons) cordons_[c.device] = c.reason;
  BALLAST_LOG(INFO) << "coordinator loaded " << policies_.size() << " policies, "
                    << paused.size() << " paused scopes, " << cordons_.size() << " cordons";
  return absl::OkStatus();
}

JobPolicy Coordinator::PolicyFor(const std::string& job) const {
  auto it = policies_.find(job);
  return it == policies_.end() ? JobPolicy{} : it->second;
}

bool Coordinator::Paused(const std::string& job) const {
  auto cluster = paused_.find("");
  auto own = paused_.find(job);
  return (cluster != paused_.end() && cluster->second) || (own != paused_.end() && own->second);
}

absl::Status Coordinator::RegisterWorker(const std::string& agent_id,
                                         const v1::WorkerIdentity& w) {
  BALLAST_RETURN_IF_ERROR(ValidateIdentity(w));
  auto [entry, created] = groups_.try_emplace({w.job(), w.group()});
  GroupEntry& group = entry->second;
  if (created) group.links = LinkModel(options_.link_stale_after);
  if (group.size != 0 && group.size != w.group_size()) {
    return absl::InvalidArgumentError(absl::StrCat("worker.group_size ", w.group_size(),
                                                   " differs from group ", w.group(), "'s ",
                                                   group.size));
  }
  group.job = w.job();
  group.name = w.group();
  group.size = w.group_size();
  for (const v1::BlockInfo& b : w.blocks()) {
    // The first worker to register a block sets its shape and initial ownership.
    auto [it, inserted] = group.blocks.try_emplace(b.block());
    if (inserted) {
      it->second.num_units = b.num_units();
      it->second.unit_bytes = b.unit_bytes();
      for (int32_t r : b.owner_of_unit()) it->second.owner_of_unit.push_back(RankId(r));
    }
  }
  if (group.plan.group.value().empty()) group.plan.group = GroupId(w.group());
  RankEntry& rank = group.ranks[w.rank()];
  // On another device or node (a replacement), what was learned of its links is not its.
  if (rank.identity.device() != w.device() || rank.identity.node() != w.node()) {
    group.links.ForgetRank(RankId(w.rank()));
  }
  rank.identity = w;
  rank.agent_id = agent_id;
  rank.attached = true;
  group.last_activity = clock_->Monotonic();
  return absl::OkStatus();
}

absl::Status Coordinator::CheckAgentCaps(
    const std::string& agent_id, const std::vector<const v1::WorkerIdentity*>& workers) const {
  std::set<std::tuple<std::string, std::string, int32_t>> ranks;
  std::set<GroupKey> groups;
  std::set<std::string> jobs;
  for (const v1::WorkerIdentity* w : workers) {
    ranks.insert({w->job(), w->group(), w->rank()});
    groups.insert({w->job(), w->group()});
    jobs.insert(w->job());
  }
  for (auto [what, count, cap, flag] :
       {std::tuple<const char*, size_t, int32_t, const char*>{
            "jobs", jobs.size(), options_.max_jobs_per_agent, "max_jobs_per_agent"},
        {"groups", groups.size(), options_.max_groups_per_agent, "max_groups_per_agent"},
        {"workers", ranks.size(), options_.max_workers_per_agent, "max_workers_per_agent"}}) {
    if (count > static_cast<size_t>(cap)) {
      return absl::ResourceExhaustedError(absl::StrCat("agent ", Excerpt(agent_id), " announces ",
                                                       count, " ", what, ", more than --", flag,
                                                       "=", cap));
    }
  }
  return absl::OkStatus();
}

void Coordinator::DetachRanksOf(const std::string& agent_id, absl::Duration now) {
  for (auto& [key, group] : groups_) {
    for (auto& [r, rank] : group.ranks) {
      if (rank.agent_id == agent_id && rank.attached) {
        rank.attached = false;
        group.last_activity = now;  // the forget_after clock starts here
      }
    }
  }
}

std::vector<const v1::WorkerIdentity*> Coordinator::AttachedWorkers(
    const std::string& agent_id) const {
  std::vector<const v1::WorkerIdentity*> out;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) {
      if (rank.attached && rank.agent_id == agent_id) out.push_back(&rank.identity);
    }
  }
  return out;
}

absl::Status Coordinator::AgentConnected(const v1::AgentHello& hello, AgentSink* sink) {
  BALLAST_RETURN_IF_ERROR(ValidateName("hello.agent_id", hello.agent_id()));
  if (!hello.node().empty()) BALLAST_RETURN_IF_ERROR(ValidateName("hello.node", hello.node()));
  std::vector<const v1::WorkerIdentity*> workers;
  for (const v1::WorkerIdentity& w : hello.workers()) {
    BALLAST_RETURN_IF_ERROR(ValidateIdentity(w));
    workers.push_back(&w);
  }
  BALLAST_RETURN_IF_ERROR(CheckAgentCaps(hello.agent_id(), workers));
  absl::MutexLock lock(&mu_);
  // The hello lists every worker the agent has now: ranks an earlier session of it
  // registered and this one does not list are gone.
  DetachRanksOf(hello.agent_id(), clock_->Monotonic());
  agents_[hello.agent_id()] = AgentEntry{hello.node(), sink};
  std::set<GroupKey> groups;
  for (const v1::WorkerIdentity& w : hello.workers()) {
    BALLAST_RETURN_IF_ERROR(RegisterWorker(hello.agent_id(), w));
    groups.insert({w.job(), w.group()});
  }
  // Replay the plans in force, so a reconnecting agent's workers converge at once.
  for (const GroupKey& key : groups) {
    const GroupEntry& group = groups_.at(key);
    if (group.plan.version.value() == 0) continue;
    v1::CoordinatorMessage message;
    message.mutable_plan()->set_job(group.job);
    *message.mutable_plan()->mutable_plan() = ToProto(group.plan);
    sink->Send(message);
  }
  BALLAST_LOG(INFO) << "agent=" << hello.agent_id() << " node=" << hello.node() << " connected with "
                    << hello.workers_size() << " workers";
  return absl::OkStatus();
}

void Coordinator::AgentDisconnected(const std::string& agent_id, AgentSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || it->second.sink != sink) return;  // superseded by a reconnect
  it->second.sink = nullptr;
  const absl::Duration now = clock_->Monotonic();
  it->second.disconnected_at = now;
  DetachRanksOf(agent_id, now);
  BALLAST_LOG(WARNING) << "agent=" << agent_id << " disconnected";
}

absl::Status Coordinator::WorkerJoined(const std::string& agent_id,
                                       const v1::WorkerIdentity& worker) {
  BALLAST_RETURN_IF_ERROR(ValidateIdentity(worker));
  absl::MutexLock lock(&mu_);
  std::vector<const v1::WorkerIdentity*> workers = AttachedWorkers(agent_id);
  workers.push_back(&worker);
  BALLAST_RETURN_IF_ERROR(CheckAgentCaps(agent_id, workers));
  BALLAST_RETURN_IF_ERROR(RegisterWorker(agent_id, worker));
  const GroupEntry& group = groups_.at({worker.job(), worker.group()});
  auto agent = agents_.find(agent_id);
  if (group.plan.version.value() > 0 && agent != agents_.end() && agent->second.sink) {
    v1::CoordinatorMessage message;
    message.mutable_plan()->set_job(group.job);
    *message.mutable_plan()->mutable_plan() = ToProto(group.plan);
    agent->second.sink->Send(message);
  }
  return absl::OkStatus();
}

absl::Status Coordinator::WorkerLeft(const std::string& agent_id,
                                     const v1::WorkerIdentity& worker) {
  BALLAST_RETURN_IF_ERROR(ValidateName("worker.job", worker.job()));
  BALLAST_RETURN_IF_ERROR(ValidateName("worker.group", worker.group()));
  absl::MutexLock lock(&mu_);
  auto it = groups_.find({worker.job(), worker.group()});
  if (it == groups_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker left unknown job '", worker.job(), "' group '", worker.group(), "'"));
  }
  auto rank = it->second.ranks.find(worker.rank());
  if (rank != it->second.ranks.end() && rank->second.agent_id == agent_id) {
    rank->second.attached = false;
    it->second.last_activity = clock_->Monotonic();
  }
  return absl::OkStatus();
}

absl::Status Coordinator::Report(const std::string& agent_id, const v1::WorkerReport& report) {
  absl::Status status = ValidateName("report.job", report.job());
  if (status.ok()) status = ValidateName("report.group", report.group());
  if (status.ok()) status = ValidateReport(report.step());
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    auto it = groups_.find({report.job(), report.group()});
    if (it == groups_.end()) {
      status = absl::NotFoundError(
          absl::StrCat("report for unknown job '", report.job(), "' group '", report.group(), "'"));
    } else if (!it->second.ranks.contains(report.rank())) {
      status = absl::NotFoundError(absl::StrCat("report for unknown rank ", report.rank(),
                                                " of group '", report.group(), "'"));
    } else {
      for (const v1::BlockTiming& b : report.step().blocks()) {
        auto block = it->second.blocks.find(b.block());
        if (block == it->second.blocks.end()) {
          status = absl::NotFoundError(absl::StrCat("report for unknown block ", b.block(),
                                                    " of group '", report.group(), "'"));
          break;
        }
        if (b.owner_of_unit_size() == 0) continue;
        if (b.owner_of_unit_size() != block->second.num_units) {
          status = absl::InvalidArgumentError(absl::StrCat(
              "report.blocks[", b.block(), "].owner_of_unit has ", b.owner_of_unit_size(),
              " entries, block has ", block->second.num_units, " units"));
          break;
        }
        for (int32_t owner : b.owner_of_unit()) {
          if (owner >= it->second.size) {
            status = absl::InvalidArgumentError(absl::StrCat(
                "report.blocks[", b.block(), "].owner_of_unit has rank ", owner));
          }
        }
      }
      if (status.ok()) {
        status = ValidateReportPeers(report.step(), report.rank(), it->second.size);
      }
      if (status.ok()) {
        // A worker reporting ownership has applied a reshard: later plans count units
        // against it (this is what a restarted coordinator relearns from).
        for (const v1::BlockTiming& b : report.step().blocks()) {
          if (b.owner_of_unit_size() == 0) continue;
          BlockEntry& block = it->second.blocks[b.block()];
          block.owner_of_unit.clear();
          for (int32_t owner : b.owner_of_unit()) block.owner_of_unit.push_back(RankId(owner));
        }
      }
    }
  }
  if (status.ok()) {
    double compute = 0, collective = report.step().agreement_seconds();
    for (const v1::BlockTiming& b : report.step().blocks()) {
      compute += b.compute_seconds();
      collective += b.comm_seconds();
    }
    absl::MutexLock lock(&mu_);
    GroupEntry& group = groups_.at({report.job(), report.group()});
    RankEntry& rank = group.ranks.at(report.rank());
    rank.last_compute_seconds = compute;
    rank.last_collective_seconds = collective;
    rank.collective_seconds.Add(collective);
    rank.step_seconds.Add(compute + collective);
    rank.last_plan_version = report.step().plan_version();
    rank.last_plan_number = report.step().plan_number();
    group.last_activity = clock_->Monotonic();
    if (group.plan_pushed_at.has_value()) {
      bool all = true;
      for (const auto& [r, peer] : group.ranks) {
        all &= !peer.attached || peer.last_plan_version >= group.plan.version.value();
      }
      if (all) {
        Observe(observations_.plan_latency_seconds,
                absl::ToDoubleSeconds(clock_->Now() - *group.plan_pushed_at));
        group.plan_pushed_at.reset();
      }
    }
  }
  if (status.ok()) {
    const absl::Time now = clock_->Now();
    for (const v1::BlockTiming& b : report.step().blocks()) {
      SpeedKey key{report.job(), GroupId(report.group()), RankId(report.rank()),
                   BlockId(b.block())};
      status = speeds_->Report(key, b.compute_seconds(), b.units_computed(), report.step().step(),
                               now);
      if (!status.ok()) break;
    }
  }
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    AddLinkSamples(report);
    // Accepted whole (the speed model too): the blocks' micro-batches price their offloads.
    auto group = groups_.find({report.job(), report.group()});
    for (const v1::BlockTiming& b : report.step().blocks()) {
      if (group == groups_.end() || b.micro_batches() <= 0) continue;
      auto block = group->second.blocks.find(b.block());
      if (block != group->second.blocks.end()) block->second.micro_batches = b.micro_batches();
    }
  }
  if (status.ok()) {
    ++counters_.reports_accepted;
  } else {
    ++counters_.reports_rejected;
  }
  (void)agent_id;
  return status;
}

void Coordinator::AddLinkSamples(const v1::WorkerReport& report) {
  auto group = groups_.find({report.job(), report.group()});
  if (group == groups_.end()) return;
  auto rank = group->second.ranks.find(report.rank());
  if (rank == group->second.ranks.end()) return;
  // A report resent after a lost stream (the speed model ignores it too) adds nothing, and
  // a block listed twice counts once.
  if (report.step().step() <= rank->second.last_link_sample_step) return;
  rank->second.last_link_sample_step = report.step().step();
  std::set<int32_t> blocks;
  for (const v1::BlockTiming& b : report.step().blocks()) {
    if (!b.has_received() || !blocks.insert(b.block()).second) continue;
    // Report checked the peer and ValidateReport the numbers: only the cap on pairs
    // refuses, and then the link keeps what it learned from the pairs it has.
    (void)group->second.links.Add(RankId(report.rank()), RankId(b.received().from_rank()),
                                  b.received().bytes(), b.received().seconds(),
                                  clock_->Monotonic());
  }
}

void Coordinator::AgentDroppedReports(int64_t dropped) {
  if (dropped <= 0) return;
  absl::MutexLock lock(&mu_);
  counters_.reports_dropped_by_agents += dropped;
}

void Coordinator::Push(const GroupEntry& group) {
  v1::CoordinatorMessage message;
  message.mutable_plan()->set_job(group.job);
  *message.mutable_plan()->mutable_plan() = ToProto(group.plan);
  std::set<std::string> agents;
  for (const auto& [r, rank] : group.ranks) agents.insert(rank.agent_id);
  for (const std::string& id : agents) {
    auto it = agents_.find(id);
    if (it == agents_.end() || it->second.sink == nullptr) continue;
    it->second.sink->Send(message);
    ++counters_.plans_pushed;
  }
}

bool Coordinator::ForgetIdle() {
  const absl::Duration now = clock_->Monotonic();
  const int64_t forgotten_before = counters_.groups_forgotten + counters_.agents_forgotten;
  for (auto it = groups_.begin(); it != groups_.end();) {
    const GroupEntry& group = it->second;
    const bool attached = std::any_of(group.ranks.begin(), group.ranks.end(),
                                      [](const auto& r) { return r.second.attached; });
    if (attached || now - group.last_activity <= options_.forget_after) {
      ++it;
      continue;
    }
    speeds_->Remove(group.job, GroupId(group.name));
    BALLAST_LOG(INFO) << "job=" << group.job << " group=" << group.name
                      << " forgotten: no worker attached or reporting for "
                      << absl::FormatDuration(now - group.last_activity);
    ++counters_.groups_forgotten;
    it = groups_.erase(it);
  }
  for (auto it = agents_.begin(); it != agents_.end();) {
    if (it->second.sink == nullptr && now - it->second.disconnected_at > options_.forget_after) {
      ++counters_.agents_forgotten;
      it = agents_.erase(it);
    } else {
      ++it;
    }
  }
  return counters_.groups_forgotten + counters_.agents_forgotten != forgotten_before;
}

void Coordinator::Tick() {
  bool trim = false;
  {
    absl::MutexLock lock(&mu_);
    trim_pending_ = ForgetIdle() || trim_pending_;
    trim = trim_pending_ && clock_->Monotonic() >= next_trim_;
    if (trim) {
      trim_pending_ = false;
      next_trim_ = clock_->Monotonic() + kTrimInterval;
    }
    DecideDueGroups();
  }
  // glibc keeps the pages of freed state in its arenas, so without this the resident size
  // would stay at the high-water mark of jobs ever held (the soak: 142 MB -> 205 MB while
  // the heap in use stayed flat). Outside the lock: a trim walks every arena.
  if (trim) ReturnFreedMemory();
}

void Coordinator::Observe(std::vector<double>& samples, double seconds) {
  // Bounded, in case nothing drains them (no metrics endpoint): keep the newest.
  constexpr size_t kMaxSamples = 4096;
  if (samples.size() >= kMaxSamples) samples.erase(samples.begin());
  samples.push_back(seconds);
}

CoordinatorObservations Coordinator::TakeObservations() {
  absl::MutexLock lock(&mu_);
  CoordinatorObservations out;
  std::swap(out, observations_);
  return out;
}

}  // namespace ballast::coordinator
