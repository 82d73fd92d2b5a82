#include "proto/validate.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/text.h"

namespace ballast {
namespace {

bool IsNameCharacter(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
         c == ':' || c == '/' || c == '@' || c == '+';
}

}  // namespace

absl::Status ValidateName(absl::string_view field, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Excerpt(name), " is longer than ", kMaxNameBytes, " bytes"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameCharacter(name[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", Excerpt(name), " has byte 0x",
                       absl::Hex(static_cast<unsigned char>(name[i]), absl::kZeroPad2),
                       " at offset ", i, ": names take ", kNameCharacters));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReason(absl::string_view field, absl::string_view reason) {
  if (reason.size() > kMaxReasonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Excerpt(reason), " is longer than ", kMaxReasonBytes, " bytes"));
  }
  for (size_t i = 0; i < reason.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(reason[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", Excerpt(reason), " has control byte 0x",
                       absl::Hex(c, absl::kZeroPad2), " at offset ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateIdentity(const v1::WorkerIdentity& id, const ShapeLimits& limits) {
  BALLAST_RETURN_IF_ERROR(ValidateName("worker.job", id.job()));
  BALLAST_RETURN_IF_ERROR(ValidateName("worker.group", id.group()));
  BALLAST_RETURN_IF_ERROR(ValidateName("worker.device", id.device()));
  if (!id.node().empty()) BALLAST_RETURN_IF_ERROR(ValidateName("worker.node", id.node()));
  if (id.group_size() < 1 || id.group_size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.group_size ", id.group_size(), " out of range [1, 4096]"));
  }
  if (id.rank() < 0 || id.rank() >= id.group_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker.rank ", id.rank(), " out of range [0, ", id.group_size(), ")"));
  }
  if (id.blocks_size() > limits.max_blocks_per_worker) {
    return absl::InvalidArgumentError(absl::StrCat("worker.blocks has ", id.blocks_size(),
                                                   " blocks, more than max_blocks_per_worker ",
                                                   limits.max_blocks_per_worker));
  }
  for (int i = 0; i < id.blocks_size(); ++i) {
    const v1::BlockInfo& b = id.blocks(i);
    // Before the entries are read: the bound is on what the block makes us hold.
    if (b.num_units() > limits.max_units_per_block ||
        b.owner_of_unit_size() > limits.max_units_per_block) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker.blocks[", i, "]: num_units ", b.num_units(), " with ", b.owner_of_unit_size(),
          " owner_of_unit entries, more than "
          "max_units_per_block ",
          limits.max_units_per_block));
    }
    if (b.num_units() < 1 || b.owner_of_unit_size() != b.num_units()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker.blocks[", i, "]: num_units ", b.num_units(), " with ",
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
      if (!std::isfinite(v) || v < 0 || v > kMaxStepSeconds) {
        return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].", name, " ", v,
                                                       " not in [0, ", kMaxStepSeconds, "]"));
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
    if (b.micro_batches() < 0 || b.micro_batches() > kMaxMicroBatches) {
      return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].micro_batches ",
                                                     b.micro_batches(), " not in [0, ",
                                                     kMaxMicroBatches, "]"));
    }
    if (b.unit_tokens_size() > kMaxUnitTokenValues) {
      return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].unit_tokens has ",
                                                     b.unit_tokens_size(), " values, more than ",
                                                     kMaxUnitTokenValues));
    }
    for (int32_t tokens : b.unit_tokens()) {
      if (tokens < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("report.blocks[", i, "].unit_tokens has ", tokens, " < 0"));
      }
    }
    if (b.tokens_computed() < 0 || b.tokens_computed() > kMaxTokensComputed) {
      return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].tokens_computed ",
                                                     b.tokens_computed(), " not in [0, ",
                                                     kMaxTokensComputed, "]"));
    }
    if (b.has_received()) {
      // Whether from_rank is in the group and not the reporter: ValidateReportAgainstShape.
      const v1::TransferSample& t = b.received();
      if (t.from_rank() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("report.blocks[", i, "].received.from_rank ", t.from_rank(), " < 0"));
      }
      if (t.bytes() <= 0 || t.bytes() > kMaxTransferSampleBytes) {
        return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].received.bytes ",
                                                       t.bytes(), " not in [1, ",
                                                       kMaxTransferSampleBytes, "]"));
      }
      if (!std::isfinite(t.seconds()) || t.seconds() <= 0 || t.seconds() > kMaxStepSeconds) {
        return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].received.seconds ",
                                                       t.seconds(), " not in (0, ", kMaxStepSeconds,
                                                       "]"));
      }
      const double rate = static_cast<double>(t.bytes()) / t.seconds();
      if (!(rate >= kMinTransferBytesPerSecond && rate <= kMaxTransferBytesPerSecond)) {
        return absl::InvalidArgumentError(
            absl::StrCat("report.blocks[", i, "].received: ", t.bytes(), " bytes in ", t.seconds(),
                         " s is ", rate, " bytes/s, not in [", kMinTransferBytesPerSecond, ", ",
                         kMaxTransferBytesPerSecond, "]"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReportAgainstShape(
    const v1::StepReport& report, int32_t rank, int32_t group_size,
    absl::FunctionRef<std::optional<int32_t>(int32_t block)> units_of_block) {
  for (int i = 0; i < report.blocks_size(); ++i) {
    const v1::BlockTiming& b = report.blocks(i);
    if (!b.has_received()) continue;
    const int32_t from = b.received().from_rank();
    if (from < 0 || from >= group_size || from == rank) {
      return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].received.from_rank ",
                                                     from, " is not a peer of rank ", rank,
                                                     " in a group of ", group_size));
    }
  }
  // Ownership first: a reshard's ownership that does not fit is the worker's error
  // (INVALID_ARGUMENT), whatever else the report says.
  for (int i = 0; i < report.blocks_size(); ++i) {
    const v1::BlockTiming& b = report.blocks(i);
    if (b.owner_of_unit_size() == 0) continue;
    const std::optional<int32_t> units = units_of_block(b.block());
    if (!units.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "report.blocks[", i, "].owner_of_unit for block ", b.block(), ", not announced"));
    }
    if (b.owner_of_unit_size() != *units) {
      return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i, "].owner_of_unit has ",
                                                     b.owner_of_unit_size(), " entries, block has ",
                                                     *units, " units (block ", b.block(), ")"));
    }
    for (int32_t owner : b.owner_of_unit()) {
      if (owner < 0 || owner >= group_size) {
        return absl::InvalidArgumentError(absl::StrCat("report.blocks[", i,
                                                       "].owner_of_unit has rank ", owner,
                                                       " in a group of ", group_size));
      }
    }
  }
  for (int i = 0; i < report.blocks_size(); ++i) {
    const v1::BlockTiming& b = report.blocks(i);
    const std::optional<int32_t> units = units_of_block(b.block());
    if (!units.has_value()) {
      return absl::NotFoundError(absl::StrCat("report.blocks[", i, "]: unknown block ", b.block(),
                                              " (not announced for the group)"));
    }
    if (b.unit_tokens_size() % *units != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "report.blocks[", i, "].unit_tokens has ", b.unit_tokens_size(),
          " values, not a whole number of Forwards of ", *units, " units (block ", b.block(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReportAgainstShape(const v1::StepReport& report,
                                        const v1::WorkerIdentity& reporter) {
  return ValidateReportAgainstShape(report, reporter.rank(), reporter.group_size(),
                                    [&reporter](int32_t block) -> std::optional<int32_t> {
                                      for (const v1::BlockInfo& announced : reporter.blocks()) {
                                        if (announced.block() == block)
                                          return announced.num_units();
                                      }
                                      return std::nullopt;
                                    });
}

}  // namespace ballast
