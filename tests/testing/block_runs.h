// Runs shared by the block tests (parallel_mlp_test.cc, parallel_attention_test.cc): a
// block with random dense parameters and a script of random steps, its factory, the
// parameterised cases of block_plans.h applied to it, and the check of a whole run
// against the dense reference (dense_reference.h).
//
//   MlpRun run{.dense = DenseBlock::Mlp(16, 128, 8)};
//   run.params = RandomNormal(run.dense.dense_size(), seed, 0.2);
//   run.config = ...;  // the block's shape; run.config.units = ReferenceUnits(owner, seed)
//   run.script = ReferenceScript(run.dense, run.config.id, ranks, owner, steps, seed);
//   RunAndExpectMatch(ApplyCase(std::move(run), plan_case));
#ifndef BALLAST_TESTS_TESTING_BLOCK_RUNS_H_
#define BALLAST_TESTS_TESTING_BLOCK_RUNS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/plan.h"
#include "ballast/types.h"
#include "gtest/gtest.h"
#include "testing/block_checks.h"
#include "testing/block_plans.h"
#include "testing/dense_reference.h"

namespace ballast::testing {

// A block under test: its dense model, random dense parameters, its config and a script.
template <typename Config>
struct BlockRun {
  DenseBlock dense;
  std::vector<float> params;
  Config config;
  Script script;
};
using MlpRun = BlockRun<MlpConfig>;
using AttentionRun = BlockRun<AttentionConfig>;

// The unit settings the dense reference models: `owner`, `seed`, and the running means
// sampled every step.
UnitConfig ReferenceUnits(const std::vector<RankId>& owner, uint32_t seed);

// `steps` random steps of batch x seq on `ranks` ranks without plans (seed + 1), with AdamW
// settings that make a skipped, doubled or misdirected update show.
Script ReferenceScript(const DenseBlock& dense, BlockId block, int ranks,
                       const std::vector<RankId>& owner, int steps, uint32_t seed,
                       int32_t batch = kBatch, int32_t seq = kSeq);

// Gives `step` its own shape: batch x seq of random x and dy (seeds `seed` and seed + 1).
void ResizeStep(ScriptStep& step, int32_t batch, int32_t seq, int32_t hidden, uint32_t seed);

// Creates the block on a rank and loads `params` into it.
BlockFactory MlpFactory(const MlpConfig& config, const MlpParams& params);
BlockFactory AttentionFactory(const AttentionConfig& config, const AttentionParams& params);
BlockFactory Factory(const MlpRun& run);
BlockFactory Factory(const AttentionRun& run);

// `run` with the case's plans offered before their steps (versions 1, 2, ... in order),
// its priority policy, backend and layout.
template <typename Config>
BlockRun<Config> ApplyCase(BlockRun<Config> run, const PlanCase& c) {
  run.config.units.priority = c.priority;
  run.config.units.priority_window = c.priority_window;
  run.script.backend = c.backend;
  run.script.processes = c.processes;
  int64_t version = 0;
  for (const auto& [step, block_plan] : c.plans) {
    run.script.steps[step].plan = Plan(++version, {block_plan}, c.imputation);
  }
  return run;
}

// Step 0 before any plan; step 1 under a plan that lists no block; step 2 under one that
// lists the block with zero pruned units on every rank. All three are plain TP.
template <typename Config>
void OfferEmptyPlans(BlockRun<Config>& run, const BlockPlans& plans) {
  run.script.steps[1].plan = Plan(1, {});
  run.script.steps[2].plan = Plan(2, {plans.Prune(std::vector<int32_t>(run.script.ranks, 0))});
}

// The block of `run` and its first step, for the shared checks in block_checks.h.
template <typename Config>
CheckedBlock Checked(const BlockRun<Config>& run) {
  return CheckedBlock{.factory = Factory(run),
                      .dense = &run.dense,
                      .params = run.params,
                      .step = &run.script.steps[0],
                      .adamw = run.script.adamw,
                      .batch = run.script.batch,
                      .seq = run.script.seq,
                      .hidden = run.dense.hidden()};
}

// Runs the script of `run` on its ranks and checks every step against the dense reference.
void RunAndExpectMatch(const DenseBlock& dense, const std::vector<float>& params,
                       const Script& script, const BlockFactory& factory, double tolerance);
template <typename Config>
void RunAndExpectMatch(const BlockRun<Config>& run, double tolerance = 1e-5) {
  RunAndExpectMatch(run.dense, run.params, run.script, Factory(run), tolerance);
}

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_BLOCK_RUNS_H_
