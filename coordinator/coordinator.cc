#include "coordinator/coordinator.h"

#include <malloc.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "coordinator/rank_speeds.h"
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
    // Every block's speeds first: a rank's verdict is pooled over all of them.
    std::vector<PoolBlock> speeds;
    for (const auto& [block_id, block] : group.blocks) {
      absl::StatusOr<GroupSpeeds> s =
          speeds_->Speeds(group.job, GroupId(group.name), BlockId(block_id), policy);
      if (!s.ok() || static_cast<int32_t>(s->ranks.size()) < group.size) {
        lines.push_back(absl::StrCat("block ", block_id, ": not every rank has reported"));
        group.explanation = absl::StrJoin(lines, "\n");
        return std::nullopt;
      }
      for (const RankSpeed& rs : s->ranks) {
        if (!rs.has_estimate) {
          lines.push_back(absl::StrCat("block ", block_id, ": rank ", rs.rank.value(),
                                       " has no estimate yet"));
          group.explanation = absl::StrJoin(lines, "\n");
          return std::nullopt;
        }
      }
      speeds.push_back({.speeds = *std::move(s), .num_units = block.num_units});
    }
    absl::StatusOr<PooledGroup> pooled = PoolRankSpeeds(speeds, policy.straggler_threshold);
    if (!pooled.ok()) {  // the policy was validated when set: only a bug gets here
      group.explanation = std::string(pooled.status().message());
      return std::nullopt;
    }
    const bool calm = TreatAsCalm(*pooled, policy.straggler_threshold,
                                  group.plan.blocks.empty(), group.marginal_rounds);
    lines.push_back(absl::StrCat(
        DescribePooledGroup(*pooled, static_cast<int32_t>(speeds.size()),
                            policy.straggler_threshold),
        calm && !pooled->calm
            ? absl::StrCat("; a marginal straggler, for ", group.marginal_rounds, " round(s) of ",
                           kMarginalRounds, " before balancing: all-local")
            : ""));
    size_t b = 0;
    for (auto& [block_id, block] : group.blocks) {
      const GroupSpeeds& block_speeds = speeds[b++].speeds;
      PlannerInput input;
      input.block = BlockId(block_id);
      input.owner_of_unit = block.owner_of_unit;
      input.transfer_seconds_per_unit =
          2.0 * static_cast<double>(block.unit_bytes) / options_.link_bytes_per_second;
      input.calm = calm;
      std::vector<int32_t> owned(group.size, 0);
      for (RankId r : block.owner_of_unit) ++owned[r.value()];
      for (const RankSpeed& rs : block_speeds.ranks) {
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
  if (!group.decisions.empty()) {
    const StepPrediction p = PredictStep(group);
    lines.push_back(absl::StrFormat(
        "step: %.4f s predicted = %.4f s of block compute + %.4f s of collectives (the "
        "smallest median over the ranks: their cost without waiting for a late peer)",
        p.blocks + p.collectives, p.blocks, p.collectives));
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

void Coordinator::DecideDueGroups() {
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

}  // namespace ballast::coordinator
