// One rank's share of a RunRecord (dense_reference.h) as bytes: how a rank that ran in a
// process of its own (rank_processes.h) hands what it saw back to the test.
#ifndef BALLAST_TESTS_TESTING_RUN_RECORD_WIRE_H_
#define BALLAST_TESTS_TESTING_RUN_RECORD_WIRE_H_

#include <string>

#include "absl/status/status.h"
#include "testing/dense_reference.h"

namespace ballast::testing {

// Rank `rank`'s initial state and its RankStep of every step.
std::string EncodeRankRecord(const RunRecord& record, int rank);

// Fills rank `rank`'s initial state and steps of `record` (already sized for every rank
// and `steps` steps) from `bytes`. INVALID_ARGUMENT when the bytes are cut short, or hold
// another step count.
absl::Status DecodeRankRecord(const std::string& bytes, int rank, RunRecord* record);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_RUN_RECORD_WIRE_H_
