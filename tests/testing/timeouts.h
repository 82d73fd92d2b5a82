// Collective timeouts in tests, stretched under tools that slow CUDA down.
//
// Tests give their backends short timeouts (20-30 s) so a broken test fails instead of
// hanging the suite. Under compute-sanitizer the first NCCL communicator of a process can
// take longer than that to initialise (24 s seen on an H100): scripts/gpu-check sets
// BALLAST_TEST_TIMEOUT_SCALE for its sanitizer runs, and every test timeout is
// multiplied by it.
#ifndef BALLAST_TESTS_TESTING_TIMEOUTS_H_
#define BALLAST_TESTS_TESTING_TIMEOUTS_H_

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"

namespace ballast::testing {

// `timeout` times BALLAST_TEST_TIMEOUT_SCALE (a number >= 1) when that is set; a value
// that is not such a number is reported on stderr and ignored.
inline absl::Duration ScaledTimeout(absl::Duration timeout) {
  const char* env = std::getenv("BALLAST_TEST_TIMEOUT_SCALE");
  if (env == nullptr) return timeout;
  double scale = 0;
  if (!absl::SimpleAtod(env, &scale) || !(scale >= 1.0) || scale > 1000.0) {
    std::fprintf(stderr, "BALLAST_TEST_TIMEOUT_SCALE='%s' is not a number in [1, 1000]: ignored\n",
                 env);
    return timeout;
  }
  return timeout * scale;
}

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_TIMEOUTS_H_
