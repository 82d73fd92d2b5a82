// A duration for people, in whole seconds: "4m12s", not "4m12.440254124s", and "0s", not
// absl's bare "0". For explain lines that say how old a measurement is or when a verdict
// is due, where sub-second digits are noise.
#ifndef BALLAST_COMMON_DURATION_TEXT_H_
#define BALLAST_COMMON_DURATION_TEXT_H_

#include <string>

#include "absl/time/time.h"

namespace ballast {

inline std::string WholeSeconds(absl::Duration d) {
  d = absl::Trunc(d, absl::Seconds(1));
  return d == absl::ZeroDuration() ? "0s" : absl::FormatDuration(d);
}

}  // namespace ballast

#endif  // BALLAST_COMMON_DURATION_TEXT_H_
