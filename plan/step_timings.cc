#include "ballast/step_timings.h"

namespace ballast {

double StepTimings::compute_seconds() const {
  double total = 0;
  for (const BlockTiming& b : blocks) total += b.compute_seconds;
  return total;
}

double StepTimings::comm_seconds() const {
  double total = agreement_seconds;
  for (const BlockTiming& b : blocks) total += b.comm_seconds;
  return total;
}

}  // namespace ballast
