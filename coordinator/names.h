// Names that come from the outside (jobs, groups, devices) become map keys, store rows
// and metric labels; one bound for all of them keeps a bad client from spending the
// coordinator's memory.
#ifndef BALLAST_COORDINATOR_NAMES_H_
#define BALLAST_COORDINATOR_NAMES_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ballast::coordinator {

inline constexpr size_t kMaxNameBytes = 256;

// INVALID_ARGUMENT naming `field` when `name` is empty or longer than kMaxNameBytes.
inline absl::Status CheckName(absl::string_view field, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " empty"));
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", name.size(), " bytes, more than ", kMaxNameBytes));
  }
  return absl::OkStatus();
}

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_NAMES_H_
