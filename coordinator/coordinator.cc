#include "coordinator/coordinator.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "coordinator/policy_proto.h"
#include "proto/convert.h"
#include "proto/validate.h"

namespace ballast::coordinator {

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
  if (options.max_reports_per_batch < 1) {
    return absl::InvalidArgumentError("max_reports_per_batch must be >= 1");
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
  GroupEntry& group = groups_[{w.job(), w.group()}];
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
        // A worker reporting ownership has applied a reshard: later plans count units
        // against it (this is what a restarted coordinator relearns from).
        for (const v1::BlockTiming& b : report.step().blocks()) {
          if (b.owner_of_unit_size() == 0) continue;
          std::vector<RankId>& owners = it->second.blocks[b.block()].owner_of_unit;
          owners.clear();
          for (int32_t owner : b.owner_of_unit()) owners.push_back(RankId(owner));
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
    ++counters_.reports_accepted;
  } else {
    ++counters_.reports_rejected;
  }
  (void)agent_id;
  return status;
}

void Coordinator::AgentDroppedReports(int64_t dropped) {
  if (dropped <= 0) return;
  absl::MutexLock lock(&mu_);
  counters_.reports_dropped_by_agents += dropped;
}

int64_t Coordinator::NextVersion(const GroupEntry& group) const {
  const int64_t now_us = absl::ToUnixMicros(clock_->Now());
  return std::max(group.plan.version.value() + 1, now_us);
}

std::optional<WorkloadPlan> Coordinator::Decide(GroupEntry& group, const JobPolicy& policy) {
  WorkloadPlan desired;
  desired.group = GroupId(group.name);
  desired.imputation = policy.imputation;
  std::vector<std::string> lines;
  ++counters_.decisions;
  if (static_cast<int32_t>(group.ranks.size()) < group.size) {
    group.explanation =
        absl::StrCat("waiting for ranks: ", group.ranks.size(), " of ", group.size, " registered");
    return std::nullopt;
  }
  // Right after a change, only a large improvement changes the plan again (see
  // CoordinatorOptions::plan_dwell).
  JobPolicy planning = policy;
  const absl::Duration now = clock_->Monotonic();
  if (policy.mode != BalanceMode::kOff && group.plan_changed_at.has_value() &&
      now - *group.plan_changed_at < options_.plan_dwell &&
      options_.dwell_hysteresis > policy.hysteresis) {
    planning.hysteresis = options_.dwell_hysteresis;
    lines.push_back(absl::StrCat("plan changed ",
                                 absl::FormatDuration(now - *group.plan_changed_at),
                                 " ago: hysteresis ", options_.dwell_hysteresis, " until the ",
                                 absl::FormatDuration(options_.plan_dwell), " dwell ends"));
  }
  if (policy.mode != BalanceMode::kOff) {
    for (auto& [block_id, block] : group.blocks) {
      absl::StatusOr<GroupSpeeds> speeds =
          speeds_->Speeds(group.job, GroupId(group.name), BlockId(block_id), policy);
      if (!speeds.ok() || static_cast<int32_t>(speeds->ranks.size()) < group.size) {
        lines.push_back(absl::StrCat("block ", block_id, ": not every rank has reported"));
        group.explanation = absl::StrJoin(lines, "\n");
        return std::nullopt;
      }
      PlannerInput input;
      input.block = BlockId(block_id);
      input.owner_of_unit = block.owner_of_unit;
      input.transfer_seconds_per_unit =
          2.0 * static_cast<double>(block.unit_bytes) / options_.link_bytes_per_second;
      std::vector<int32_t> owned(group.size, 0);
      for (RankId r : block.owner_of_unit) ++owned[r.value()];
      for (const RankSpeed& rs : speeds->ranks) {
        if (!rs.has_estimate) {
          lines.push_back(absl::StrCat("block ", block_id, ": rank ", rs.rank.value(),
                                       " has no estimate yet"));
          group.explanation = absl::StrJoin(lines, "\n");
          return std::nullopt;
        }
        PlannerRank pr;
        pr.seconds_per_unit = rs.seconds_per_unit;
        pr.owned_units = owned[rs.rank.value()];
        pr.chronic = rs.state == StragglerState::kChronic;
        const RankEntry& entry = group.ranks.at(rs.rank.value());
        pr.cordoned = cordons_.contains(entry.identity.device());
        input.ranks.push_back(pr);
      }
      // A block the plan in force leaves out runs all-local: that is the current plan to
      // beat by the hysteresis, so noise never flips a group in and out of balancing.
      BlockPlan current;
      current.block = BlockId(block_id);
      for (const BlockPlan& bp : group.plan.blocks) {
        if (bp.block.value() == block_id) current = bp;
      }
      current.owner_of_unit.clear();  // ownership already moved: counts refer to it
      absl::StatusOr<BlockDecision> decision = PlanBlock(input, planning, &current);
      if (!decision.ok()) {
        lines.push_back(absl::StrCat("block ", block_id, ": ", decision.status().message()));
        continue;
      }
      lines.push_back(absl::StrCat("block ", block_id, ":\n", decision->explanation));
      BlockPlan bp = decision->plan;
      bp.block = BlockId(block_id);
      const bool trivial =
          bp.offloads.empty() && bp.owner_of_unit.empty() &&
          std::all_of(bp.pruned_units.begin(), bp.pruned_units.end(), [](int32_t n) { return n == 0; });
      if (!trivial) desired.blocks.push_back(std::move(bp));
      group.decisions[block_id] = *std::move(decision);
    }
  }
  group.explanation = absl::StrJoin(lines, "\n");
  if (policy.mode == BalanceMode::kObserve) return std::nullopt;  // explain, never push
  // Workers that report a plan newer than ours run one an earlier coordinator pushed (we
  // restarted and lost it): whatever we decide, even all-local, must replace it, or a
  // group relieved of its straggler would keep offloading for good.
  int64_t workers_version = 0, workers_number = 0;
  for (const auto& [r, rank] : group.ranks) {
    if (!rank.attached) continue;
    workers_version = std::max(workers_version, rank.last_plan_version);
    workers_number = std::max(workers_number, rank.last_plan_number);
  }
  const bool unknown_plan_in_force = workers_version > group.plan.version.value();
  // Compare content, not versions: an unchanged plan is not re-pushed.
  WorkloadPlan current = group.plan;
  current.version = PlanVersion(0);
  if (!unknown_plan_in_force) {
    if (current.blocks == desired.blocks &&
        (desired.blocks.empty() || current.imputation == desired.imputation)) {
      return std::nullopt;
    }
    if (group.plan.version.value() == 0 && desired.blocks.empty()) return std::nullopt;
  }
  // Above every version a worker runs, so the workers take it (they ignore older ones),
  // and numbered on from the plan they run, so a restart does not count from 1 again.
  desired.version = PlanVersion(std::max(NextVersion(group), workers_version + 1));
  desired.number = std::max(group.plan.number, workers_number) + 1;
  return desired;
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

void Coordinator::ForgetIdle() {
  const absl::Duration now = clock_->Monotonic();
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
}

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  ForgetIdle();
  const absl::Duration now = clock_->Monotonic();
  for (auto& [key, group] : groups_) {
    if (now < group.next_decision) continue;
    const JobPolicy policy = PolicyFor(group.job);
    group.next_decision = now + policy.report_period;
    if (Paused(group.job)) {
      group.explanation = "balancing paused: the plan in force stays";
      continue;
    }
    const absl::Time began = absl::Now();
    std::optional<WorkloadPlan> plan = Decide(group, policy);
    Observe(observations_.decision_seconds, absl::ToDoubleSeconds(absl::Now() - began));
    if (!plan.has_value()) continue;
    // A reshard moves ownership for good: later plans count units against it.
    for (const BlockPlan& bp : plan->blocks) {
      if (!bp.owner_of_unit.empty()) group.blocks[bp.block.value()].owner_of_unit = bp.owner_of_unit;
    }
    group.plan = *std::move(plan);
    ++counters_.plan_changes;
    BALLAST_LOG(INFO) << "job=" << group.job << " group=" << group.name << " new plan "
                      << PlanSummary(group.plan);
    Push(group);
    group.plan_pushed_at = clock_->Now();
    group.plan_changed_at = clock_->Monotonic();
  }
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


absl::StatusOr<v1::ClusterStatus> Coordinator::Status(const std::string& job) const {
  if (!job.empty()) BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  absl::MutexLock lock(&mu_);
  v1::ClusterStatus out;
  std::map<std::string, v1::JobStatus*> jobs;
  for (const auto& [key, group] : groups_) {
    if (!job.empty() && group.job != job) continue;
    v1::JobStatus*& js = jobs[group.job];
    if (js == nullptr) {
      js = out.add_jobs();
      js->set_job(group.job);
      js->set_paused(Paused(group.job));
      *js->mutable_policy() = PolicyToProto(PolicyFor(group.job));
    }
    v1::GroupStatus* gs = js->add_groups();
    gs->set_group(group.name);
    gs->set_size(group.size);
    gs->set_plan_version(group.plan.version.value());
    gs->set_plan_number(group.plan.number);
    gs->set_plan_summary(PlanSummary(group.plan));
    double predicted = 0;
    for (const auto& [b, d] : group.decisions) predicted += d.predicted_step_seconds;
    gs->set_predicted_step_seconds(predicted);
    int64_t units = 0, pruned = 0, offloaded = 0;
    for (const auto& [b, block] : group.blocks) units += block.num_units;
    for (const BlockPlan& bp : group.plan.blocks) {
      for (int32_t n : bp.pruned_units) pruned += n;
      for (const Offload& o : bp.offloads) offloaded += o.units;
    }
    if (units > 0) {
      gs->set_pruned_fraction(static_cast<double>(pruned) / units);
      gs->set_offloaded_fraction(static_cast<double>(offloaded) / units);
    }
    double measured = 0;
    for (const auto& [r, rank] : group.ranks) {
      measured = std::max(measured, rank.last_compute_seconds + rank.last_collective_seconds);
    }
    gs->set_measured_step_seconds(measured);
    const int32_t first_block = group.blocks.empty() ? -1 : group.blocks.begin()->first;
    absl::StatusOr<GroupSpeeds> speeds =
        first_block < 0 ? absl::NotFoundError("no blocks")
                        : speeds_->Speeds(group.job, GroupId(group.name), BlockId(first_block),
                                          PolicyFor(group.job));
    for (const auto& [r, rank] : group.ranks) {
      v1::RankStatus* rs = gs->add_ranks();
      rs->set_rank(r);
      rs->set_device(rank.identity.device());
      rs->set_node(rank.identity.node());
      rs->set_compute_seconds(rank.last_compute_seconds);
      rs->set_collective_seconds(rank.last_collective_seconds);
      std::string state = rank.attached ? "normal" : "detached";
      if (speeds.ok()) {
        for (const RankSpeed& s : speeds->ranks) {
          if (s.rank.value() != r) continue;
          rs->set_seconds_per_unit(s.has_estimate ? s.seconds_per_unit : 0);
          if (rank.attached) state = s.stale ? "stale" : std::string(StragglerStateName(s.state));
        }
      }
      if (cordons_.contains(rank.identity.device())) state = "cordoned";
      rs->set_state(state);
    }
  }
  if (!job.empty() && jobs.empty() && !policies_.contains(job)) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' unknown"));
  }
  int32_t agents = 0;
  for (const auto& [id, a] : agents_) agents += a.sink != nullptr;
  out.set_agents(agents);
  int32_t workers = 0;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) workers += rank.attached;
  }
  out.set_workers(workers);
  out.set_paused(Paused(""));
  for (const auto& [device, reason] : cordons_) out.add_cordoned_devices(device);
  return out;
}

absl::StatusOr<JobPolicy> Coordinator::GetPolicy(const std::string& job) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  absl::MutexLock lock(&mu_);
  auto it = policies_.find(job);
  if (it != policies_.end()) return it->second;
  for (const auto& [key, group] : groups_) {
    if (group.job == job) return JobPolicy{};
  }
  return absl::NotFoundError(absl::StrCat("job '", job, "' unknown (no workers, no policy)"));
}

absl::Status Coordinator::CheckJobKnown(const std::string& job) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  absl::MutexLock lock(&mu_);
  if (policies_.contains(job) || paused_.contains(job)) return absl::OkStatus();
  for (const auto& [key, group] : groups_) {
    if (group.job == job) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(
      "job '", job, "' is not known to the coordinator (no workers, no policy, no pause); "
      "preconfigure it (ballastctl --preconfigure) to set it ahead of the job's start"));
}

absl::Status Coordinator::SetPolicy(const std::string& job, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidatePolicy(policy));
  // Durable first: an operator's setting is never in force without being stored.
  BALLAST_RETURN_IF_ERROR(store_->PutPolicy(job, policy));
  absl::MutexLock lock(&mu_);
  policies_[job] = policy;
  for (auto& [key, group] : groups_) {
    if (group.job == job) group.next_decision = absl::ZeroDuration();  // re-plan now
  }
  BALLAST_LOG(INFO) << "job=" << job << " policy set: mode " << BalanceModeName(policy.mode);
  return absl::OkStatus();
}

absl::Status Coordinator::SetPaused(const std::string& job, bool paused) {
  if (!job.empty()) BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(store_->SetPaused(job, paused));
  absl::MutexLock lock(&mu_);
  paused_[job] = paused;
  BALLAST_LOG(INFO) << (paused ? "paused" : "resumed") << " balancing for "
                    << (job.empty() ? std::string("the cluster") : absl::StrCat("job ", job));
  return absl::OkStatus();
}

absl::Status Coordinator::SetCordon(const std::string& device, bool cordoned,
                                    const std::string& reason) {
  BALLAST_RETURN_IF_ERROR(ValidateName("device", device));
  BALLAST_RETURN_IF_ERROR(ValidateReason("reason", reason));
  if (!cordoned) {
    absl::MutexLock lock(&mu_);
    if (!cordons_.contains(device)) {
      return absl::NotFoundError(absl::StrCat("device '", device, "' is not cordoned"));
    }
  }
  BALLAST_RETURN_IF_ERROR(store_->SetCordon(device, cordoned, reason, clock_->Now()));
  absl::MutexLock lock(&mu_);
  if (cordoned) {
    cordons_[device] = reason;
  } else {
    cordons_.erase(device);
  }
  for (auto& [key, group] : groups_) group.next_decision = absl::ZeroDuration();
  BALLAST_LOG(INFO) << (cordoned ? "cordoned" : "uncordoned") << " device " << device
                    << (reason.empty() ? "" : ": ") << reason;
  return absl::OkStatus();
}

absl::StatusOr<v1::Explanation> Coordinator::Explain(const std::string& job,
                                                     const std::string& group) const {
  BALLAST_RETURN_IF_ERROR(ValidateName("job", job));
  BALLAST_RETURN_IF_ERROR(ValidateName("group", group));
  absl::MutexLock lock(&mu_);
  auto it = groups_.find({job, group});
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' group '", group, "' unknown"));
  }
  v1::Explanation out;
  out.set_job(job);
  out.set_group(group);
  out.set_plan_version(it->second.plan.version.value());
  out.set_plan_number(it->second.plan.number);
  *out.mutable_plan() = ToProto(it->second.plan);
  out.set_text(it->second.explanation.empty() ? "no decision yet" : it->second.explanation);
  return out;
}

CoordinatorCounters Coordinator::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

int32_t Coordinator::connected_agents() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& [id, a] : agents_) n += a.sink != nullptr;
  return n;
}

int32_t Coordinator::attached_workers() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) n += rank.attached;
  }
  return n;
}

}  // namespace ballast::coordinator
