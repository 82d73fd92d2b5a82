// Planner benchmark: how long PlanBlock takes per block decision; one JSON object per line.
//
// A group of 8 ranks, 64 units per rank, 24 blocks, the default policy (w = 1 s, prune
// budgets 0.5 / 0.25, hysteresis 0.05), 1 ms per unit on a healthy rank, 0.1 ms transfer
// per offloaded unit. Cases:
//   straggler_2x          one rank 2x slower
//   straggler_2x_chronic  the same, marked chronic, so a reshard is priced as well
//   straggler_2x_fixed    the chronic straggler with slower collectives too: a fixed cost
//                         of 16 of its units beyond the others' (coordinator/fixed_costs.h)
//   two_stragglers        two ranks 1.5x and 2x slower, both chronic
//   random                every rank 1x-10x, each block its own speeds, transfer cost
//                         (0 to 2 ms), accuracy weight (pruning from free to dear) and
//                         budgets: the planner's worst case (pruning worth weighing)
// Modes auto, migrate, resize (`planner_bench CASE [MODE]` runs one case, for profiling). Each
// repetition plans all 24 blocks from scratch (no current plan), with one PlannerWorkspace
// kept across them as the coordinator keeps one across a group's blocks; the reported time
// per block is the median over repetitions, and the slowest block's median is reported too.
// Target: 50 us per block decision. The explanation (rendered only when asked) is timed
// apart: explain_microseconds_per_block.
// `planner_bench digest [COUNT]` prints decisions instead of times: diff its output across
// two builds to show that a change to the planner's speed left its decisions alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "coordinator/planner/planner.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRanks = 8;
constexpr int kUnitsPerRank = 64;
constexpr int kBlocks = 24;
constexpr double kTargetMicroseconds = 50;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Block {
  PlannerInput input;
  JobPolicy policy;
};

std::vector<Block> MakeBlocks(const std::string& name, BalanceMode mode, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<Block> blocks;
  for (int b = 0; b < kBlocks; ++b) {
    Block block;
    block.policy.mode = mode;
    PlannerInput& in = block.input;
    in.block = BlockId(b);
    in.transfer_seconds_per_unit = 1e-4;
    for (int r = 0; r < kRanks; ++r) {
      PlannerRank rank;
      // Blocks differ a little (attention vs MLP, measurement noise).
      rank.seconds_per_unit = 1e-3 * (1 + 0.01 * (unit(rng) - 0.5));
      rank.owned_units = kUnitsPerRank;
      in.ranks.push_back(rank);
      for (int u = 0; u < kUnitsPerRank; ++u) in.owner_of_unit.push_back(RankId(r));
    }
    if (name == "straggler_2x" || name == "straggler_2x_chronic" || name == "straggler_2x_fixed") {
      in.ranks[5].seconds_per_unit *= 2;
      in.ranks[5].chronic = name != "straggler_2x";
      if (name == "straggler_2x_fixed") in.ranks[5].fixed_seconds = 16 * 2e-3;
    } else if (name == "two_stragglers") {
      in.ranks[2].seconds_per_unit *= 1.5;
      in.ranks[6].seconds_per_unit *= 2;
      in.ranks[2].chronic = in.ranks[6].chronic = true;
    } else if (name == "random") {
      for (PlannerRank& rank : in.ranks) {
        rank.seconds_per_unit = 1e-3 * (1 + 9 * unit(rng));
        rank.chronic = unit(rng) < 0.25;
      }
      in.transfer_seconds_per_unit = 2e-3 * unit(rng);
      const double lambda = 3e-3 * unit(rng);  // seconds per pruned unit
      block.policy.accuracy_weight_seconds = lambda * kRanks * kUnitsPerRank;
      block.policy.max_pruned_fraction_rank = unit(rng);
      block.policy.max_pruned_fraction_group = unit(rng);
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

// `planner_bench digest [COUNT]`: one line per decision on COUNT random blocks (2-8 ranks,
// uneven splits, cordons, chronic ranks, every mode, with and without a plan in force):
// the chosen candidate, every candidate's objective to 17 digits and the plan pushed. Run
// it on two builds and diff the output to show that a change to the planner's speed left
// its decisions identical.
int Digest(int count) {
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> unit(0, 1);
  const BalanceMode modes[] = {BalanceMode::kAuto, BalanceMode::kMigrate, BalanceMode::kResize};
  PlannerWorkspace workspace;
  for (int i = 0; i < count; ++i) {
    JobPolicy policy;
    policy.mode = modes[i % 3];
    PlannerInput in;
    in.block = BlockId(i);
    const int ranks = 2 + static_cast<int>(unit(rng) * 7);
    const int per_rank = 4 + static_cast<int>(unit(rng) * 61);
    const bool uneven = unit(rng) < 0.3;
    for (int r = 0; r < ranks; ++r) {
      PlannerRank rank;
      rank.seconds_per_unit = 1e-3 * (1 + 9 * unit(rng));
      rank.chronic = unit(rng) < 0.25;
      rank.cordoned = unit(rng) < 0.05;
      in.ranks.push_back(rank);
    }
    for (int u = 0; u < ranks * per_rank; ++u) {
      const int owner = uneven ? static_cast<int>(unit(rng) * ranks) : u / per_rank;
      in.owner_of_unit.push_back(RankId(owner));
      ++in.ranks[owner].owned_units;
    }
    in.transfer_seconds_per_unit = 2e-3 * unit(rng);
    policy.accuracy_weight_seconds = 3e-3 * unit(rng) * ranks * per_rank;
    policy.max_pruned_fraction_rank = unit(rng);
    policy.max_pruned_fraction_group = unit(rng);
    absl::StatusOr<BlockDecision> first = PlanBlock(in, policy, nullptr, &workspace);
    // The same block a little later, its speeds moved, with the first plan in force.
    PlannerInput later = in;
    for (PlannerRank& rank : later.ranks) rank.seconds_per_unit *= 0.9 + 0.2 * unit(rng);
    absl::StatusOr<BlockDecision> second;
    if (first.ok()) second = PlanBlock(later, policy, &first->plan, &workspace);
    for (const absl::StatusOr<BlockDecision>* d : {&first, &second}) {
      if (!d->ok()) {
        std::printf("%d error %s\n", i, std::string(d->status().message()).c_str());
        continue;
      }
      const BlockDecision& decision = **d;
      std::printf("%d %s kept=%d calm=%d evens=%d obj=%.17g step=%.17g |", i,
                  std::string(CandidateKindName(decision.chosen)).c_str(), decision.kept_current,
                  decision.calm, decision.evens_split, decision.objective,
                  decision.predicted_step_seconds);
      for (const PlanCandidate& c : decision.candidates) {
        std::printf(" %s:%d:%.17g", std::string(CandidateKindName(c.kind)).c_str(), c.feasible,
                    c.cost.objective);
      }
      std::printf(" | z");
      for (int32_t z : decision.plan.pruned_units) std::printf(" %d", z);
      std::printf(" o");
      for (const Offload& o : decision.plan.offloads)
        std::printf(" %d>%d:%d", o.owner.value(), o.helper.value(), o.units);
      std::printf(" m");
      for (RankId owner : decision.plan.owner_of_unit) std::printf(" %d", owner.value());
      std::printf("\n");
    }
  }
  return 0;
}

// `only`, `only_mode`: one case's name and one mode's (profiling), or empty for all.
int Run(const std::string& only, const std::string& only_mode) {
  const char* names[] = {"straggler_2x", "straggler_2x_chronic", "straggler_2x_fixed",
                         "two_stragglers", "random"};
  const BalanceMode modes[] = {BalanceMode::kAuto, BalanceMode::kMigrate, BalanceMode::kResize};
  if (!only.empty() && std::find(std::begin(names), std::end(names), only) == std::end(names)) {
    std::fprintf(stderr,
                 "unknown case '%s': straggler_2x, straggler_2x_chronic, straggler_2x_fixed, "
                 "two_stragglers or random\n",
                 only.c_str());
    return 2;
  }
  if (!only_mode.empty() && only_mode != "auto" && only_mode != "migrate" &&
      only_mode != "resize") {
    std::fprintf(stderr, "unknown mode '%s': auto, migrate or resize\n", only_mode.c_str());
    return 2;
  }
  for (const char* name : names) {
    if (!only.empty() && only != name) continue;
    for (BalanceMode mode : modes) {
      if (!only_mode.empty() && only_mode != BalanceModeName(mode)) continue;
      const std::vector<Block> blocks = MakeBlocks(name, mode, 17);
      constexpr int kReps = 200;
      std::vector<double> per_rep;
      std::vector<std::vector<double>> per_block(kBlocks);
      double sink = 0;
      PlannerWorkspace workspace;
      for (int rep = 0; rep < kReps + 5; ++rep) {
        const Clock::time_point start = Clock::now();
        for (int b = 0; b < kBlocks; ++b) {
          const Clock::time_point t0 = Clock::now();
          absl::StatusOr<BlockDecision> d =
              PlanBlock(blocks[b].input, blocks[b].policy, nullptr, &workspace);
          const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          if (!d.ok()) {
            std::fprintf(stderr, "%s %s block %d: %s\n", name,
                         std::string(BalanceModeName(mode)).c_str(), b,
                         std::string(d.status().message()).c_str());
            return 1;
          }
          sink += d->objective;
          if (rep >= 5) per_block[b].push_back(us);
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        if (rep >= 5) per_rep.push_back(us / kBlocks);  // the first 5 warm the caches
      }
      double slowest = 0;
      for (const std::vector<double>& v : per_block) slowest = std::max(slowest, Median(v));
      const double us = Median(per_rep);
      // The explanation is rendered apart, when someone asks (ballastctl explain): its
      // cost per block, reported beside the decision's rather than inside it.
      std::vector<BlockDecision> decisions;
      for (const Block& block : blocks) {
        decisions.push_back(*PlanBlock(block.input, block.policy, nullptr, &workspace));
      }
      std::vector<double> explain_per_rep;
      for (int rep = 0; rep < kReps / 4 + 5; ++rep) {
        const Clock::time_point start = Clock::now();
        for (int b = 0; b < kBlocks; ++b) {
          sink += static_cast<double>(
              ExplainDecision(blocks[b].input, blocks[b].policy, decisions[b]).size());
        }
        const double took = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        if (rep >= 5) explain_per_rep.push_back(took / kBlocks);
      }
      std::printf(
          "{\"bench\":\"planner\",\"case\":\"%s\",\"mode\":\"%s\",\"ranks\":%d,"
          "\"units_per_rank\":%d,\"blocks\":%d,\"microseconds_per_block\":%.2f,"
          "\"slowest_block_microseconds\":%.2f,\"explain_microseconds_per_block\":%.2f,"
          "\"target_microseconds\":%.0f,\"meets_target\":%s}\n",
          name, std::string(BalanceModeName(mode)).c_str(), kRanks, kUnitsPerRank, kBlocks, us,
          slowest, Median(explain_per_rep), kTargetMicroseconds,
          us <= kTargetMicroseconds ? "true" : "false");
      if (sink < 0) std::printf("unreachable\n");
    }
  }
  return 0;
}

}  // namespace
}  // namespace ballast::coordinator

// planner_bench [CASE [MODE]]: every case, or only CASE (in only MODE: auto, migrate, resize).
// planner_bench digest [COUNT]: decisions to compare across builds (Digest).
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "digest") {
    char* end = nullptr;
    const long count = argc > 2 ? std::strtol(argv[2], &end, 10) : 3000;
    if (argc > 3 || (argc > 2 && (*end != '\0' || count <= 0 || count > 1000000))) {
      std::fprintf(stderr, "usage: planner_bench digest [COUNT], COUNT in 1..1000000\n");
      return 2;
    }
    return ballast::coordinator::Digest(static_cast<int>(count));
  }
  return ballast::coordinator::Run(argc > 1 ? argv[1] : "", argc > 2 ? argv[2] : "");
}
