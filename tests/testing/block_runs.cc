#include "testing/block_runs.h"

#include <memory>

#include "common/status_macros.h"

namespace ballast::testing {

UnitConfig ReferenceUnits(const std::vector<RankId>& owner, uint32_t seed) {
  UnitConfig units;
  units.owner_of_unit = owner;
  units.seed = seed;
  // The reference samples running means every step.
  units.mean_interval = 1;
  return units;
}

Script ReferenceScript(const DenseBlock& dense, BlockId block, int ranks,
                       const std::vector<RankId>& owner, int steps, uint32_t seed, int32_t batch,
                       int32_t seq) {
  Script script;
  script.ranks = ranks;
  script.block = block;
  script.owner_of_unit = owner;
  script.batch = batch;
  script.seq = seq;
  // lr: large enough that three steps move weights far beyond the tolerance, so a skipped
  // or doubled update cannot pass. eps: large, because AdamW's first steps are ~lr * g / |g|
  // and would turn float rounding in a gradient that is zero in exact arithmetic (the key
  // bias of attention: softmax ignores a shift of all scores) into steps of +-lr; with
  // lr / eps = 0.1 a gradient's rounding error moves a weight by a tenth of it at most.
  script.adamw.lr = 1e-2f;
  script.adamw.eps = 1e-1f;
  script.mean_decay = UnitConfig().mean_decay;
  script.steps = RandomSteps(dense, batch, seq, steps, seed + 1);
  return script;
}

void ResizeStep(ScriptStep& step, int32_t batch, int32_t seq, int32_t hidden, uint32_t seed) {
  const size_t n = static_cast<size_t>(batch) * seq * hidden;
  step.batch = batch;
  step.seq = seq;
  step.x = RandomNormal(n, seed, 1.0);
  step.dy = RandomNormal(n, seed + 1, 1.0);
}

BlockFactory MlpFactory(const MlpConfig& config, const MlpParams& params) {
  return [config, params](RankContext& ctx) -> absl::StatusOr<std::unique_ptr<ParallelBlock>> {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelMlp> mlp,
                             ParallelMlp::Create(ctx.group.get(), config));
    BALLAST_RETURN_IF_ERROR(mlp->LoadDense(params));
    return std::unique_ptr<ParallelBlock>(std::move(mlp));
  };
}

BlockFactory AttentionFactory(const AttentionConfig& config, const AttentionParams& params) {
  return [config, params](RankContext& ctx) -> absl::StatusOr<std::unique_ptr<ParallelBlock>> {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelAttention> attention,
                             ParallelAttention::Create(ctx.group.get(), config));
    BALLAST_RETURN_IF_ERROR(attention->LoadDense(params));
    return std::unique_ptr<ParallelBlock>(std::move(attention));
  };
}

BlockFactory Factory(const MlpRun& run) {
  return MlpFactory(run.config, run.dense.ToMlpParams(run.params));
}

BlockFactory Factory(const AttentionRun& run) {
  return AttentionFactory(run.config, run.dense.ToAttentionParams(run.params));
}

void RunAndExpectMatch(const DenseBlock& dense, const std::vector<float>& params,
                       const Script& script, const BlockFactory& factory, double tolerance) {
  absl::StatusOr<RunRecord> record = RunScript(script, factory);
  ASSERT_TRUE(record.ok()) << record.status();
  ExpectRunMatchesReference(dense, params, script, *record, tolerance);
}

}  // namespace ballast::testing
