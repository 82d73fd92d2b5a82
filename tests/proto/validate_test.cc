// The edge's checks (proto/validate.h): shape limits on identities, and the one check of a
// report against what its group announced, which the agent and the coordinator both make.
#include "proto/validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ballast {
namespace {

using ::testing::HasSubstr;

v1::WorkerIdentity Identity(int blocks, int units) {
  v1::WorkerIdentity w;
  w.set_job("vit");
  w.set_group("tp0");
  w.set_rank(0);
  w.set_group_size(2);
  w.set_device("dev0");
  for (int b = 0; b < blocks; ++b) {
    v1::BlockInfo* info = w.add_blocks();
    info->set_block(b);
    info->set_num_units(units);
    info->mutable_owner_of_unit()->Resize(units, 1);
  }
  return w;
}

TEST(ValidateIdentityTest, TheShapeIsBoundedAndTheErrorNamesTheLimit) {
  EXPECT_TRUE(ValidateIdentity(Identity(2, 4)).ok());
  const ShapeLimits tight{.max_units_per_block = 3, .max_blocks_per_worker = 1};
  absl::Status s = ValidateIdentity(Identity(1, 4), tight);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_units 4 with 4 owner_of_unit entries, more than "
                                     "max_units_per_block 3"));
  s = ValidateIdentity(Identity(2, 1), tight);
  EXPECT_THAT(s.message(), HasSubstr("worker.blocks has 2 blocks, more than "
                                     "max_blocks_per_worker 1"));
  // The owners a block lists are bounded too, whatever num_units claims.
  v1::WorkerIdentity lying = Identity(1, 3);
  lying.mutable_blocks(0)->mutable_owner_of_unit()->Resize(10, 0);
  EXPECT_THAT(ValidateIdentity(lying, tight).message(), HasSubstr("max_units_per_block"));
}

TEST(ValidateReportTest, OneBoundForEveryTiming) {
  v1::StepReport r;
  v1::BlockTiming* b = r.add_blocks();
  b->set_compute_seconds(kMaxStepSeconds);
  EXPECT_TRUE(ValidateReport(r).ok());
  b->set_comm_seconds(kMaxStepSeconds + 1);
  EXPECT_EQ(ValidateReport(r).message(), "report.blocks[0].comm_seconds 3601 not in [0, 3600]");
}

TEST(ValidateReportTest, TokenLoadsAreCountsAndBounded) {
  v1::StepReport r;
  r.add_blocks();
  v1::BlockTiming* b = r.add_blocks();
  for (int tokens : {4, 0, 6}) b->add_unit_tokens(tokens);
  b->set_tokens_computed(10);
  EXPECT_TRUE(ValidateReport(r).ok());

  b->set_unit_tokens(1, -2);
  absl::Status s = ValidateReport(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "report.blocks[1].unit_tokens has -2 < 0");
  b->set_unit_tokens(1, 0);

  b->set_tokens_computed(-1);
  s = ValidateReport(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "report.blocks[1].tokens_computed -1 not in [0, 1099511627776]");
  b->set_tokens_computed(kMaxTokensComputed + 1);
  EXPECT_THAT(std::string(ValidateReport(r).message()), HasSubstr("tokens_computed"));
  b->set_tokens_computed(2'000'000);  // a large MoE step's rows: taken
  EXPECT_TRUE(ValidateReport(r).ok());
  b->set_tokens_computed(0);
  EXPECT_TRUE(ValidateReport(r).ok());

  b->mutable_unit_tokens()->Resize(kMaxUnitTokenValues, 1);
  EXPECT_TRUE(ValidateReport(r).ok());
  b->add_unit_tokens(1);
  s = ValidateReport(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("report.blocks[1].unit_tokens has ", kMaxUnitTokenValues + 1,
                                     " values, more than ", kMaxUnitTokenValues)));
}

class ReportAgainstShapeTest : public ::testing::Test {
 protected:
  // The agent's view: rank 0 of 2, block 0 of 4 units announced.
  absl::Status Check(const v1::StepReport& r) {
    return ValidateReportAgainstShape(r, Identity(1, 4));
  }
  v1::StepReport Report(int block) {
    v1::StepReport r;
    r.set_step(1);
    r.add_blocks()->set_block(block);
    return r;
  }
};

TEST_F(ReportAgainstShapeTest, ABlockNotAnnouncedIsUnknown) {
  EXPECT_TRUE(Check(Report(0)).ok());
  absl::Status s = Check(Report(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("unknown block 3"));
}

TEST_F(ReportAgainstShapeTest, OwnershipMustFitTheAnnouncedBlock) {
  v1::StepReport r = Report(0);
  for (int o : {0, 1, 1}) r.mutable_blocks(0)->add_owner_of_unit(o);
  EXPECT_THAT(Check(r).message(), HasSubstr("owner_of_unit has 3 entries, block has 4 units"));
  r.mutable_blocks(0)->add_owner_of_unit(2);
  EXPECT_THAT(Check(r).message(), HasSubstr("owner_of_unit has rank 2 in a group of 2"));
  r.mutable_blocks(0)->set_owner_of_unit(3, 1);
  EXPECT_TRUE(Check(r).ok());
  r.mutable_blocks(0)->set_block(5);
  absl::Status s = Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("owner_of_unit for block 5, not announced"));
}

TEST_F(ReportAgainstShapeTest, TokenLoadsAreWholeForwardsOfTheBlocksUnits) {
  v1::StepReport r = Report(0);
  for (int i = 0; i < 8; ++i) r.mutable_blocks(0)->add_unit_tokens(1);  // 2 forwards x 4
  EXPECT_TRUE(Check(r).ok());
  r.mutable_blocks(0)->add_unit_tokens(1);
  absl::Status s = Check(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "report.blocks[0].unit_tokens has 9 values, not a whole number of Forwards of 4 units "
            "(block 0)");
  r.mutable_blocks(0)->clear_unit_tokens();  // none: a block whose units do not divide
  EXPECT_TRUE(Check(r).ok());
}

TEST_F(ReportAgainstShapeTest, ATransferSampleComesFromAPeer) {
  v1::StepReport r = Report(0);
  r.mutable_blocks(0)->mutable_received()->set_from_rank(0);
  EXPECT_EQ(Check(r).message(),
            "report.blocks[0].received.from_rank 0 is not a peer of rank 0 in a group of 2");
  r.mutable_blocks(0)->mutable_received()->set_from_rank(1);
  EXPECT_TRUE(Check(r).ok());
}

TEST_F(ReportAgainstShapeTest, TheCoordinatorsViewIsTheSameCheck) {
  // The coordinator's shape is the group's blocks, not one identity's.
  auto units = [](int32_t block) -> std::optional<int32_t> {
    if (block == 7) return 2;
    return std::nullopt;
  };
  v1::StepReport r = Report(7);
  EXPECT_TRUE(ValidateReportAgainstShape(r, 1, 2, units).ok());
  r.mutable_blocks(0)->add_owner_of_unit(0);
  EXPECT_THAT(ValidateReportAgainstShape(r, 1, 2, units).message(),
              HasSubstr("owner_of_unit has 1 entries, block has 2 units"));
  EXPECT_EQ(ValidateReportAgainstShape(Report(0), 1, 2, units).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ballast
