#include "coordinator/link_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {

absl::Status LinkModel::Add(RankId receiver, RankId sender, int64_t bytes, double seconds) {
  if (receiver.value() < 0 || sender.value() < 0 || receiver == sender) {
    return absl::InvalidArgumentError(absl::StrCat("transfer from rank ", sender.value(),
                                                   " to rank ", receiver.value(),
                                                   ": not two distinct ranks"));
  }
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("transfer bytes ", bytes, " must be > 0"));
  }
  if (!std::isfinite(seconds) || seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer seconds ", seconds, " must be finite and > 0"));
  }
  const int32_t low = std::min(receiver.value(), sender.value());
  const int32_t high = std::max(receiver.value(), sender.value());
  if (pairs_.size() >= kMaxPairs && !pairs_.contains({low, high})) {
    return absl::ResourceExhaustedError(
        absl::StrCat("link model holds ", kMaxPairs, " pairs of ranks already"));
  }
  Pair& pair = pairs_[{low, high}];
  const double value = seconds / static_cast<double>(bytes);
  if (pair.seconds_per_byte.size() < kWindow) {
    pair.seconds_per_byte.push_back(value);
  } else {
    pair.seconds_per_byte[pair.next] = value;
  }
  pair.next = (pair.next + 1) % kWindow;
  return absl::OkStatus();
}

std::optional<LinkModel::Estimate> LinkModel::Slowest() const {
  std::optional<Estimate> slowest;
  std::vector<double> sorted;
  for (const auto& [key, pair] : pairs_) {
    if (pair.seconds_per_byte.size() < kMinSamples) continue;
    sorted = pair.seconds_per_byte;
    const size_t at = static_cast<size_t>(kQuantile * static_cast<double>(sorted.size() - 1));
    std::nth_element(sorted.begin(), sorted.begin() + at, sorted.end());
    const double bytes_per_second = 1.0 / sorted[at];
    if (!slowest.has_value() || bytes_per_second < slowest->bytes_per_second) {
      slowest = Estimate{.bytes_per_second = bytes_per_second,
                         .a = RankId(key.first),
                         .b = RankId(key.second),
                         .samples = static_cast<int32_t>(pair.seconds_per_byte.size())};
    }
  }
  return slowest;
}

void LinkModel::ForgetRank(RankId rank) {
  std::erase_if(pairs_, [rank](const auto& entry) {
    return entry.first.first == rank.value() || entry.first.second == rank.value();
  });
}

}  // namespace ballast::coordinator
