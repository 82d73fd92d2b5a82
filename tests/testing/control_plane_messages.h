// The wire messages control-plane tests and fuzz targets build again and again: a worker's
// identity with one block, an agent's hello for a whole group, and a rank's report of one
// step. Header-only (generated protobuf types only). What a test needs beyond them (a
// plan version, collective seconds, a transfer sample) it sets on the message returned.
//
//   v1::AgentHello hello = GroupHello({.owner_of_unit = {0, 0, 0, 0, 1, 1, 1, 1}});
//   v1::WorkerReport r = StepReport({}, /*rank=*/1, /*step=*/7, /*units=*/4, /*seconds=*/8e-3);
//   *r.mutable_step()->add_blocks() = BlockTime(/*block=*/1, /*units=*/4, /*seconds=*/8e-3);
#ifndef BALLAST_TESTS_TESTING_CONTROL_PLANE_MESSAGES_H_
#define BALLAST_TESTS_TESTING_CONTROL_PLANE_MESSAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ballast/v1/agent.pb.h"

namespace ballast::testing {

// One group of ranks with one block (block 0), all on one agent. With no owner_of_unit
// the workers announce no block at all.
struct GroupSpec {
  std::string agent_id = "agent-1";
  std::string node;  // empty: not set
  std::string job = "vit";
  std::string group = "tp0";
  int32_t size = 2;
  std::vector<int32_t> owner_of_unit = {0, 0, 0, 0, 1, 1, 1, 1};
  int64_t unit_bytes = 1000;
  bool units_divide = false;  // block 0's units are experts
  // Rank r's device is device_prefix + r.
  std::string device_prefix = "dev";
};

// Rank `rank`'s identity in `spec`.
inline v1::WorkerIdentity GroupWorker(const GroupSpec& spec, int32_t rank) {
  v1::WorkerIdentity w;
  w.set_job(spec.job);
  w.set_group(spec.group);
  w.set_rank(rank);
  w.set_group_size(spec.size);
  w.set_device(spec.device_prefix + std::to_string(rank));
  if (spec.owner_of_unit.empty()) return w;
  v1::BlockInfo* b = w.add_blocks();
  b->set_block(0);
  b->set_num_units(static_cast<int32_t>(spec.owner_of_unit.size()));
  for (int32_t o : spec.owner_of_unit) b->add_owner_of_unit(o);
  b->set_unit_bytes(spec.unit_bytes);
  b->set_units_divide(spec.units_divide);
  return w;
}

// The agent's hello with every rank of `spec`.
inline v1::AgentHello GroupHello(const GroupSpec& spec) {
  v1::AgentHello hello;
  hello.set_agent_id(spec.agent_id);
  if (!spec.node.empty()) hello.set_node(spec.node);
  for (int32_t rank = 0; rank < spec.size; ++rank) *hello.add_workers() = GroupWorker(spec, rank);
  return hello;
}

// Block `block` computed `units` units in `seconds`.
inline v1::BlockTiming BlockTime(int32_t block, int32_t units, double seconds) {
  v1::BlockTiming b;
  b.set_block(block);
  b.set_units_computed(units);
  b.set_compute_seconds(seconds);
  return b;
}

// Rank `rank` of `spec` reports `step`: block 0 computed `units` units in `seconds`.
inline v1::WorkerReport StepReport(const GroupSpec& spec, int32_t rank, int64_t step, int32_t units,
                                   double seconds) {
  v1::WorkerReport r;
  r.set_job(spec.job);
  r.set_group(spec.group);
  r.set_rank(rank);
  r.mutable_step()->set_step(step);
  *r.mutable_step()->add_blocks() = BlockTime(0, units, seconds);
  return r;
}

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_CONTROL_PLANE_MESSAGES_H_
