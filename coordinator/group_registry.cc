#include "coordinator/group_registry.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "proto/convert.h"

namespace ballast::coordinator {

void ObserveBounded(std::vector<double>& samples, double seconds) {
  constexpr size_t kMaxSamples = 4096;
  if (samples.size() >= kMaxSamples) samples.erase(samples.begin());
  samples.push_back(seconds);
}

void GroupRegistry::RecentSeconds::Add(double seconds) {
  if (values.size() < kStepWindow) {
    values.push_back(seconds);
  } else {
    values[next] = seconds;
  }
  next = (next + 1) % kStepWindow;
}

double GroupRegistry::RecentSeconds::Median() const {
  if (values.empty()) return 0;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

GroupRegistry::GroupRegistry(const RegistryOptions& options, Clock* clock, SpeedModel* speeds)
    : options_(options), clock_(clock), speeds_(speeds) {}

int64_t GroupRegistry::ShapeBytes(const v1::WorkerIdentity& worker) {
  int64_t units = 0;
  for (const v1::BlockInfo& b : worker.blocks()) units += b.num_units();
  return units * static_cast<int64_t>(sizeof(RankId));
}

absl::Status GroupRegistry::CheckAgentCaps(const std::string& agent_id,
                                           const std::vector<CappedWorker>& workers) const {
  // A rank announced twice (re-registered) counts once, as last announced.
  std::map<std::tuple<std::string, std::string, int32_t>, int64_t> ranks;
  std::set<GroupKey> groups;
  std::set<std::string> jobs;
  for (const CappedWorker& w : workers) {
    ranks[{w.job, w.group, w.rank}] = w.shape_bytes;
    groups.insert({w.job, w.group});
    jobs.insert(w.job);
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
  int64_t shape_bytes = 0;
  for (const auto& [rank, bytes] : ranks) shape_bytes += bytes;
  if (shape_bytes > options_.max_shape_bytes_per_agent) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "agent ", Excerpt(agent_id), " announces block shapes of ", shape_bytes,
        " bytes, more than --max_shape_bytes_per_agent=", options_.max_shape_bytes_per_agent));
  }
  return absl::OkStatus();
}

absl::Status GroupRegistry::CheckFitsGroup(const v1::WorkerIdentity& w) const {
  auto it = groups_.find({w.job(), w.group()});
  if (it != groups_.end() && it->second.size != 0 && it->second.size != w.group_size()) {
    return absl::InvalidArgumentError(absl::StrCat("worker.group_size ", w.group_size(),
                                                   " differs from group ", w.group(), "'s ",
                                                   it->second.size));
  }
  // The ranks of a TP group run the same blocks, so a group holds what one worker may
  // announce. Without this bound, workers rejoining with new block ids each time would
  // grow a group that stays active (and so never forgotten) past every per-agent cap.
  if (it != groups_.end()) {
    size_t blocks = it->second.blocks.size();
    for (const v1::BlockInfo& b : w.blocks()) {
      if (!it->second.blocks.contains(b.block())) ++blocks;
    }
    if (blocks > static_cast<size_t>(options_.shape.max_blocks_per_worker)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", Excerpt(w.group()), " would hold ", blocks, " blocks, more than --",
          "max_blocks_per_worker=", options_.shape.max_blocks_per_worker,
          " (its ranks run the same blocks)"));
    }
  }
  return absl::OkStatus();
}

void GroupRegistry::RegisterWorker(const std::string& agent_id, const v1::WorkerIdentity& w) {
  auto [entry, created] = groups_.try_emplace({w.job(), w.group()});
  GroupEntry& group = entry->second;
  if (created) {
    group.incarnation = next_incarnation_++;
    group.links = LinkModel(options_.link_stale_after);
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
      it->second.units_divide = b.units_divide();
      it->second.owner_of_unit.reserve(b.owner_of_unit_size());
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
  // clear_blocks() would keep their storage for reuse; swapped out, it is freed.
  google::protobuf::RepeatedPtrField<v1::BlockInfo>().Swap(rank.identity.mutable_blocks());
  rank.shape_bytes = ShapeBytes(w);
  rank.agent_id = agent_id;
  rank.attached = true;
  group.last_activity = clock_->Monotonic();
}

void GroupRegistry::DetachRanksOf(const std::string& agent_id, absl::Duration now) {
  for (auto& [key, group] : groups_) {
    for (auto& [r, rank] : group.ranks) {
      if (rank.agent_id == agent_id && rank.attached) {
        rank.attached = false;
        group.last_activity = now;  // the forget_after clock starts here
      }
    }
  }
}

std::vector<GroupRegistry::CappedWorker> GroupRegistry::AttachedWorkers(
    const std::string& agent_id) const {
  std::vector<CappedWorker> out;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) {
      if (rank.attached && rank.agent_id == agent_id) {
        out.push_back({group.job, group.name, r, rank.shape_bytes});
      }
    }
  }
  return out;
}

void GroupRegistry::SendPlan(const GroupEntry& group, AgentSink* sink) const {
  v1::CoordinatorMessage message;
  message.mutable_plan()->set_job(group.job);
  *message.mutable_plan()->mutable_plan() = ToProto(group.plan);
  sink->Send(message);
}

absl::Status GroupRegistry::AgentConnected(const v1::AgentHello& hello, AgentSink* sink) {
  BALLAST_RETURN_IF_ERROR(ValidateName("hello.agent_id", hello.agent_id()));
  if (!hello.node().empty()) BALLAST_RETURN_IF_ERROR(ValidateName("hello.node", hello.node()));
  std::vector<CappedWorker> workers;
  for (const v1::WorkerIdentity& w : hello.workers()) {
    BALLAST_RETURN_IF_ERROR(ValidateIdentity(w, options_.shape));
    workers.push_back({w.job(), w.group(), w.rank(), ShapeBytes(w)});
  }
  BALLAST_RETURN_IF_ERROR(CheckAgentCaps(hello.agent_id(), workers));
  absl::MutexLock lock(&mu_);
  // Refused whole: every worker fits its registered group, and the hello's workers of
  // one group agree on its size, before anything changes.
  std::map<GroupKey, int32_t> sizes;
  for (const v1::WorkerIdentity& w : hello.workers()) {
    BALLAST_RETURN_IF_ERROR(CheckFitsGroup(w));
    auto [it, inserted] = sizes.try_emplace({w.job(), w.group()}, w.group_size());
    if (!inserted && it->second != w.group_size()) {
      return absl::InvalidArgumentError(absl::StrCat("worker.group_size ", w.group_size(),
                                                     " differs from group ", w.group(), "'s ",
                                                     it->second));
    }
  }
  // The hello lists every worker the agent has now: ranks an earlier session of it
  // registered and this one does not list are gone.
  DetachRanksOf(hello.agent_id(), clock_->Monotonic());
  agents_[hello.agent_id()] = AgentEntry{hello.node(), sink};
  for (const v1::WorkerIdentity& w : hello.workers()) RegisterWorker(hello.agent_id(), w);
  // Replay the plans in force, so a reconnecting agent's workers converge at once.
  for (const auto& [key, size] : sizes) {
    const GroupEntry& group = groups_.at(key);
    if (group.plan.version.value() != 0) SendPlan(group, sink);
  }
  BALLAST_LOG(INFO) << "agent=" << hello.agent_id() << " node=" << hello.node()
                    << " connected with " << hello.workers_size() << " workers";
  return absl::OkStatus();
}

void GroupRegistry::AgentDisconnected(const std::string& agent_id, AgentSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || it->second.sink != sink) return;  // superseded by a reconnect
  it->second.sink = nullptr;
  const absl::Duration now = clock_->Monotonic();
  it->second.disconnected_at = now;
  DetachRanksOf(agent_id, now);
  BALLAST_LOG(WARNING) << "agent=" << agent_id << " disconnected";
}

absl::Status GroupRegistry::WorkerJoined(const std::string& agent_id,
                                         const v1::WorkerIdentity& worker) {
  BALLAST_RETURN_IF_ERROR(ValidateIdentity(worker, options_.shape));
  absl::MutexLock lock(&mu_);
  std::vector<CappedWorker> workers = AttachedWorkers(agent_id);
  workers.push_back({worker.job(), worker.group(), worker.rank(), ShapeBytes(worker)});
  BALLAST_RETURN_IF_ERROR(CheckAgentCaps(agent_id, workers));
  BALLAST_RETURN_IF_ERROR(CheckFitsGroup(worker));
  RegisterWorker(agent_id, worker);
  const GroupEntry& group = groups_.at({worker.job(), worker.group()});
  auto agent = agents_.find(agent_id);
  if (group.plan.version.value() > 0 && agent != agents_.end() && agent->second.sink) {
    SendPlan(group, agent->second.sink);
  }
  return absl::OkStatus();
}

absl::Status GroupRegistry::WorkerLeft(const std::string& agent_id,
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

absl::Status GroupRegistry::Report(const std::string& agent_id, const v1::WorkerReport& report) {
  (void)agent_id;
  // What needs nothing of the registry, before its lock.
  absl::Status status = ValidateName("report.job", report.job());
  if (status.ok()) status = ValidateName("report.group", report.group());
  if (status.ok()) status = ValidateReport(report.step());
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    auto group = groups_.find({report.job(), report.group()});
    if (group == groups_.end()) {
      status = absl::NotFoundError(
          absl::StrCat("report for unknown job '", report.job(), "' group '", report.group(), "'"));
    } else if (auto rank = group->second.ranks.find(report.rank());
               rank == group->second.ranks.end()) {
      status = absl::NotFoundError(absl::StrCat("report for unknown rank ", report.rank(),
                                                " of group '", report.group(), "'"));
    } else {
      const std::map<int32_t, BlockEntry>& blocks = group->second.blocks;
      status = ValidateReportAgainstShape(report.step(), report.rank(), group->second.size,
                                          [&blocks](int32_t block) -> std::optional<int32_t> {
                                            auto it = blocks.find(block);
                                            if (it == blocks.end()) return std::nullopt;
                                            return it->second.num_units;
                                          });
      // The speed model before the registry, so that a report it refuses leaves the
      // registry unchanged. Values were checked above, so it refuses only past its key cap
      // (max_keys); the blocks before the refused one are then already recorded there.
      const absl::Time now = clock_->Now();
      for (const v1::BlockTiming& b : report.step().blocks()) {
        if (!status.ok()) break;
        SpeedKey key{report.job(), GroupId(report.group()), RankId(report.rank()),
                     BlockId(b.block())};
        // A block whose units divide is timed by the tokens it computed (an expert's
        // seconds follow its tokens, which change every step), the others by their units.
        const bool by_tokens = blocks.at(b.block()).units_divide;
        status = speeds_->Report(key, b.compute_seconds(),
                                 by_tokens ? b.tokens_computed() : b.units_computed(),
                                 report.step().step(), now);
      }
      if (status.ok()) Apply(group->second, rank->second, report);
    }
  }
  if (status.ok()) {
    ++counters_.reports_accepted;
  } else {
    ++counters_.reports_rejected;
  }
  return status;
}

void GroupRegistry::Apply(GroupEntry& group, RankEntry& rank, const v1::WorkerReport& report) {
  const v1::StepReport& step = report.step();
  double compute = 0, collective = step.agreement_seconds();
  int64_t units = 0;
  for (const v1::BlockTiming& b : step.blocks()) {
    compute += b.compute_seconds();
    units += b.units_computed();
    collective += b.comm_seconds();
    BlockEntry& block = group.blocks.at(b.block());  // checked against the shape
    // A worker reporting ownership has applied a reshard: later plans count units
    // against it (this is what a restarted coordinator relearns from).
    if (b.owner_of_unit_size() > 0) {
      block.owner_of_unit.clear();
      for (int32_t owner : b.owner_of_unit()) block.owner_of_unit.push_back(RankId(owner));
    }
    // The blocks' micro-batches price their offloads.
    if (b.micro_batches() > 0) block.micro_batches = b.micro_batches();
    // Token loads, smoothed (BlockSnapshot::unit_tokens); checked against the shape. All
    // ranks route alike, so one rank's reports are taken, each step once (ranks report
    // out of step with each other, so taking any rank's newest would count some steps
    // twice); another rank's once that one detaches. Not only newer steps: a restarted job
    // counts its steps from 0 again.
    auto source = group.ranks.find(block.tokens_rank);
    const bool from_source = block.tokens_rank == report.rank() || source == group.ranks.end() ||
                             !source->second.attached;
    if (block.units_divide && b.unit_tokens_size() > 0 && from_source &&
        !(block.tokens_rank == report.rank() && step.step() == block.tokens_step)) {
      const int32_t n = block.num_units;
      std::vector<double> step_tokens(n, 0.0);
      for (int i = 0; i < b.unit_tokens_size(); ++i) step_tokens[i % n] += b.unit_tokens(i);
      if (block.unit_tokens.size() != step_tokens.size()) block.unit_tokens = step_tokens;
      for (int32_t u = 0; u < n; ++u) {
        block.unit_tokens[u] = 0.5 * block.unit_tokens[u] + 0.5 * step_tokens[u];
      }
      block.token_forwards = b.unit_tokens_size() / n;
      block.tokens_step = step.step();
      block.tokens_rank = report.rank();
    }
  }
  rank.last_compute_seconds = compute;
  rank.last_collective_seconds = collective;
  rank.last_units_computed = units;
  rank.collective_seconds.Add(collective);
  rank.step_seconds.Add(compute + collective);
  if (step.plan_version() != rank.last_plan_version) {
    rank.plan_step_seconds = RecentSeconds();
    rank.plan_collective_seconds = RecentSeconds();
    rank.plan_steps = 0;
  }
  rank.plan_step_seconds.Add(compute + collective);
  rank.plan_collective_seconds.Add(collective);
  ++rank.plan_steps;
  rank.last_plan_version = step.plan_version();
  rank.last_plan_number = step.plan_number();
  group.last_activity = clock_->Monotonic();
  if (group.plan_pushed_at.has_value()) {
    bool all = true;
    for (const auto& [r, peer] : group.ranks) {
      all &= !peer.attached || peer.last_plan_version >= group.plan.version.value();
    }
    if (all) {
      ObserveBounded(plan_latencies_, absl::ToDoubleSeconds(clock_->Now() - *group.plan_pushed_at));
      group.plan_pushed_at.reset();
    }
  }
  // Transfer samples for the link model. A report resent after a lost stream (the speed
  // model ignores it too) adds nothing, and a block listed twice counts once.
  if (step.step() <= rank.last_link_sample_step) return;
  rank.last_link_sample_step = step.step();
  std::set<int32_t> sampled;
  for (const v1::BlockTiming& b : step.blocks()) {
    if (!b.has_received() || !sampled.insert(b.block()).second) continue;
    // The shape check took the peer and ValidateReport the numbers: only the cap on
    // pairs refuses, and then the link keeps what it learned from the pairs it has.
    (void)group.links.Add(RankId(report.rank()), RankId(b.received().from_rank()),
                          b.received().bytes(), b.received().seconds(), clock_->Monotonic());
  }
}

void GroupRegistry::AgentDroppedReports(int64_t dropped) {
  if (dropped <= 0) return;
  absl::MutexLock lock(&mu_);
  counters_.reports_dropped_by_agents += dropped;
}

GroupRegistry::Forgotten GroupRegistry::ForgetIdle() {
  absl::MutexLock lock(&mu_);
  const absl::Duration now = clock_->Monotonic();
  Forgotten forgotten;
  for (auto it = groups_.begin(); it != groups_.end();) {
    const GroupEntry& group = it->second;
    const bool attached = std::any_of(group.ranks.begin(), group.ranks.end(),
                                      [](const auto& r) { return r.second.attached; });
    if (attached || now - group.last_activity <= options_.forget_after) {
      ++it;
      continue;
    }
    // Under the lock, so that no report of the group re-creates its estimates after.
    speeds_->Remove(group.job, GroupId(group.name));
    BALLAST_LOG(INFO) << "job=" << group.job << " group=" << group.name
                      << " forgotten: no worker attached or reporting for "
                      << absl::FormatDuration(now - group.last_activity);
    ++counters_.groups_forgotten;
    forgotten.groups.push_back({it->first, group.incarnation});
    it = groups_.erase(it);
  }
  for (auto it = agents_.begin(); it != agents_.end();) {
    if (it->second.sink == nullptr && now - it->second.disconnected_at > options_.forget_after) {
      ++counters_.agents_forgotten;
      ++forgotten.agents;
      it = agents_.erase(it);
    } else {
      ++it;
    }
  }
  return forgotten;
}

std::vector<GroupRef> GroupRegistry::Groups() const {
  absl::MutexLock lock(&mu_);
  std::vector<GroupRef> out;
  out.reserve(groups_.size());
  for (const auto& [key, group] : groups_) out.push_back({key, group.incarnation});
  return out;
}

GroupSnapshot GroupRegistry::SnapshotOf(const GroupEntry& group, bool with_ownership) const {
  GroupSnapshot s;
  s.ref = {{group.job, group.name}, group.incarnation};
  s.job = group.job;
  s.name = group.name;
  s.size = group.size;
  s.ranks.reserve(group.ranks.size());
  for (const auto& [r, rank] : group.ranks) {
    s.ranks.push_back({.rank = r,
                       .attached = rank.attached,
                       .device = rank.identity.device(),
                       .node = rank.identity.node(),
                       .last_compute_seconds = rank.last_compute_seconds,
                       .last_collective_seconds = rank.last_collective_seconds,
                       .last_units_computed = rank.last_units_computed,
                       .collective_median = rank.collective_seconds.Median(),
                       .collective_samples = rank.collective_seconds.values.size(),
                       .step_median = rank.step_seconds.Median(),
                       .plan_step_median = rank.plan_step_seconds.Median(),
                       .plan_collective_median = rank.plan_collective_seconds.Median(),
                       .plan_steps = rank.plan_steps,
                       .last_plan_version = rank.last_plan_version,
                       .last_plan_number = rank.last_plan_number});
  }
  s.blocks.reserve(group.blocks.size());
  for (const auto& [b, block] : group.blocks) {
    const int32_t id = b;  // clang before 16 cannot capture a structured binding
    const auto stated = std::find_if(group.plan.blocks.begin(), group.plan.blocks.end(),
                                     [id](const BlockPlan& bp) { return bp.block.value() == id; });
    const bool move_made =
        stated != group.plan.blocks.end() && MoveMade(*stated, block.owner_of_unit);
    s.blocks.push_back(
        {.block = b,
         .num_units = block.num_units,
         .unit_bytes = block.unit_bytes,
         .micro_batches = block.micro_batches,
         .units_divide = block.units_divide,
         .unit_tokens = block.unit_tokens,
         .token_forwards = block.token_forwards,
         .owner_of_unit = with_ownership ? block.owner_of_unit : std::vector<RankId>(),
         .move_made = move_made});
  }
  s.plan = group.plan;
  s.plan_changed_at = group.plan_changed_at;
  s.link = group.links.Slowest(clock_->Monotonic());
  s.link_stale_after = group.links.stale_after();
  return s;
}

std::optional<GroupSnapshot> GroupRegistry::Snapshot(const GroupKey& key,
                                                     bool with_ownership) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(key);
  if (it == groups_.end()) return std::nullopt;
  return SnapshotOf(it->second, with_ownership);
}

std::vector<GroupSnapshot> GroupRegistry::Snapshots(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  std::vector<GroupSnapshot> out;
  for (const auto& [key, group] : groups_) {
    if (job.empty() || group.job == job) out.push_back(SnapshotOf(group, false));
  }
  return out;
}

void GroupRegistry::Push(const GroupEntry& group) {
  std::set<std::string> agents;
  for (const auto& [r, rank] : group.ranks) agents.insert(rank.agent_id);
  for (const std::string& id : agents) {
    auto it = agents_.find(id);
    if (it == agents_.end() || it->second.sink == nullptr) continue;
    SendPlan(group, it->second.sink);
    ++counters_.plans_pushed;
  }
}

bool GroupRegistry::Publish(const GroupRef& ref, const WorkloadPlan& plan) {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(ref.key);
  if (it == groups_.end() || it->second.incarnation != ref.incarnation) return false;
  GroupEntry& group = it->second;
  group.plan = plan;
  ++counters_.plan_changes;
  Push(group);
  group.plan_pushed_at = clock_->Now();
  group.plan_changed_at = clock_->Monotonic();
  return true;
}

bool GroupRegistry::HasJob(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, group] : groups_) {
    if (group.job == job) return true;
  }
  return false;
}

int32_t GroupRegistry::connected_agents() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& [id, a] : agents_) n += a.sink != nullptr;
  return n;
}

int32_t GroupRegistry::attached_workers() const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (const auto& [key, group] : groups_) {
    for (const auto& [r, rank] : group.ranks) n += rank.attached;
  }
  return n;
}

RegistryCounters GroupRegistry::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::vector<double> GroupRegistry::TakePlanLatencies() {
  absl::MutexLock lock(&mu_);
  std::vector<double> out;
  out.swap(plan_latencies_);
  return out;
}

}  // namespace ballast::coordinator
