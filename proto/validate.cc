#include "proto/validate.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ballast {

absl::Status ValidateIdentity(const v1::WorkerIdentity& id) {
  if (id.job().empty()) return absl::InvalidArgumentError("worker.job is empty");
  if (id.group().empty()) return absl::InvalidArgumentError("worker.group is empty");
  if (id.device().empty()) return absl::InvalidArgumentError("worker.device is empty");
  if (id.group_size() < 1 || id.group_size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.group_size ", id.group_size(), " out of range [1, 4096]"));
  }
  if (id.rank() < 0 || id.rank() >= id.group_size()) {
    return absl::InvalidArgumentError(absl::StrCat("worker.rank ", id.rank(),
                                                   " out of range [0, ", id.group_size(), ")"));
  }
  for (int i = 0; i < id.blocks_size(); ++i) {
    const v1::BlockInfo& b = id.blocks(i);
    if (b.num_units() < 1 || b.owner_of_unit_size() != b.num_units()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker.blocks[", i, "]: num_units ", b.num_units(), " with ",
          b.owner_of_unit_size(), " owner_of_unit entries"));
    }
    for (int32_t owner : b.owner_of_unit()) {
      if (owner < 0 || owner >= id.group_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker.blocks[", i, "].owner_of_unit has rank ", owner));
      }
    }
    if (b.unit_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("worker.blocks[", i, "].unit_bytes < 0"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReport(const v1::StepReport& r) {
  if (r.step() < 0) return absl::InvalidArgumentError(absl::StrCat("report.step ", r.step()));
  if (!std::isfinite(r.agreement_seconds()) || r.agreement_seconds() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("report.agreement_seconds ", r.agreement_seconds()));
  }
  for (int i = 0; i < r.blocks_size(); ++i) {
    const v1::BlockTiming& b = r.blocks(i);
    for (auto [name, v] : {std::pair<const char*, double>{"compute_seconds", b.compute_seconds()},
                           {"comm_seconds", b.comm_seconds()}}) {
      if (!std::isfinite(v) || v < 0 || v > 3600) {
        return absl::InvalidArgumentError(
            absl::StrCat("report.blocks[", i, "].", name, " ", v, " not in [0, 3600]"));
      }
    }
    for (int32_t owner : b.owner_of_unit()) {
      if (owner < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("report.blocks[", i, "].owner_of_unit has rank ", owner));
      }
    }
    if (b.units_computed() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("report.blocks[", i, "].units_computed ", b.units_computed(), " < 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ballast
