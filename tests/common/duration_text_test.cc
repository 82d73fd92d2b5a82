// WholeSeconds: truncated to whole seconds, zero spelled "0s".
#include "common/duration_text.h"

#include <gtest/gtest.h>

namespace ballast {
namespace {

TEST(DurationTextTest, WholeSecondsTruncateAndSpellZero) {
  EXPECT_EQ(WholeSeconds(absl::Seconds(252.44)), "4m12s");
  EXPECT_EQ(WholeSeconds(absl::Milliseconds(999)), "0s");
  EXPECT_EQ(WholeSeconds(absl::ZeroDuration()), "0s");
  EXPECT_EQ(WholeSeconds(absl::Hours(2)), "2h");
}

}  // namespace
}  // namespace ballast
