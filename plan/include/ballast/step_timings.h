// What one rank measured in one step: the worker fills it (TpGroup::EndStep), the agent
// and the coordinator read it off the wire (proto/convert.h). Plain data, so the control
// plane needs no part of the worker library to speak of it.
#ifndef BALLAST_STEP_TIMINGS_H_
#define BALLAST_STEP_TIMINGS_H_

#include <cstdint>
#include <vector>

#include "ballast/types.h"

namespace ballast {

// Compute versus collective time of one block over one step, on this rank.
struct BlockTiming {
  BlockId block;
  // Forward + backward compute (GEMMs, kernels), excluding waits in collectives.
  double compute_seconds = 0;
  // Time inside collectives and point-to-point transfers (including waiting for peers).
  double comm_seconds = 0;
  // Units this rank computed: its own kept units plus those it computed as a helper.
  int32_t units_computed = 0;
  // compute_seconds / units_computed; 0 when nothing was computed. The speed signal.
  double seconds_per_unit = 0;
  // The step's Backward calls (its micro-batches): an offloaded unit's weight gradients
  // return to its owner once per Backward, its weights go out once a step.
  int32_t micro_batches = 0;
  // A link sample, once in 16 offloading steps (blocks take turns): the offloaded weights
  // this rank received as a helper, when they all came from one owner that sent to no one
  // else at the same time, their bytes and the seconds of the transfer (started together
  // behind a barrier). The coordinator learns link speeds from these. received_from = -1:
  // no sample (not the block's turn, nothing received, several owners or a shared one).
  int32_t received_from = -1;
  int64_t received_bytes = 0;
  double received_seconds = 0;
  // Blocks whose units divide (BlockShape::units_divide, a mixture of experts) only: the
  // tokens each Forward of the step routed to each unit, Forward-major (forwards x
  // num_units values; a recompute's Forward is not counted), and the token rows this rank
  // computed (the speed signal of such a block: compute_seconds / tokens_computed).
  std::vector<int32_t> unit_tokens;
  int64_t tokens_computed = 0;
};

// Everything a rank measured in one step.
struct StepTimings {
  int64_t step = 0;
  PlanVersion plan_version;
  int64_t plan_number = 0;  // WorkloadPlan::number of that plan
  // Time spent agreeing on (and applying) the plan at the step boundary.
  double agreement_seconds = 0;
  std::vector<BlockTiming> blocks;
  double compute_seconds() const;
  double comm_seconds() const;
};

}  // namespace ballast

#endif  // BALLAST_STEP_TIMINGS_H_
