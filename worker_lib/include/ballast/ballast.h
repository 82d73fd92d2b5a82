// Umbrella header for the Ballast worker library: everything a training program needs.
#ifndef BALLAST_BALLAST_H_
#define BALLAST_BALLAST_H_

#include "ballast/backend.h"
#include "ballast/block.h"
#include "ballast/ownership.h"
#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/parallel_moe.h"
#include "ballast/plan.h"
#include "ballast/step_timings.h"
#include "ballast/tp_group.h"
#include "ballast/types.h"

#endif  // BALLAST_BALLAST_H_
