#include "coordinator/link_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {

absl::Status LinkModel::Add(RankId receiver, RankId sender, int64_t bytes, double seconds,
                            absl::Duration now) {
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
  if (!pair.seconds_per_byte.empty() && now - pair.newest_at > stale_after_) {
    // Back after going stale: a window afresh, priced at the fastest sample seen until it
    // fills (see the header).
    double fastest = *std::min_element(pair.seconds_per_byte.begin(), pair.seconds_per_byte.end());
    if (pair.relearn_from.has_value()) fastest = std::min(fastest, *pair.relearn_from);
    if (pair.seconds_per_byte.size() >= kMinSamples || pair.relearn_from.has_value()) {
      pair.relearn_from = fastest;
    }
    pair.seconds_per_byte.clear();
    pair.next = 0;
  }
  const double value = seconds / static_cast<double>(bytes);
  if (pair.seconds_per_byte.size() < kWindow) {
    pair.seconds_per_byte.push_back(value);
  } else {
    pair.seconds_per_byte[pair.next] = value;
  }
  pair.next = (pair.next + 1) % kWindow;
  pair.newest_at = now;
  if (pair.seconds_per_byte.size() >= kMinSamples) pair.relearn_from.reset();
  return absl::OkStatus();
}

std::optional<LinkModel::Estimate> LinkModel::EstimateOf(const Pair& pair,
                                                         absl::Duration now) const {
  const size_t n = pair.seconds_per_byte.size();
  const absl::Duration age = now - pair.newest_at;
  Estimate e{.samples = static_cast<int32_t>(n), .age = age};
  if (n >= kMinSamples && age <= stale_after_) {
    std::vector<double> sorted = pair.seconds_per_byte;
    const size_t at = static_cast<size_t>(kQuantile * static_cast<double>(n - 1));
    std::nth_element(sorted.begin(), sorted.begin() + at, sorted.end());
    e.bytes_per_second = 1.0 / sorted[at];
    e.basis = Basis::kLearned;
  } else if (n >= kMinSamples) {
    e.bytes_per_second =
        1.0 / *std::min_element(pair.seconds_per_byte.begin(), pair.seconds_per_byte.end());
    e.basis = Basis::kStale;
  } else if (pair.relearn_from.has_value()) {
    // Relearning, stale or not: the price it went stale at, or a faster new sample.
    double fastest = *pair.relearn_from;
    for (double v : pair.seconds_per_byte) fastest = std::min(fastest, v);
    e.bytes_per_second = 1.0 / fastest;
    e.basis = Basis::kRelearning;
  } else {
    return std::nullopt;  // never had kMinSamples samples
  }
  return e;
}

std::optional<LinkModel::Estimate> LinkModel::Slowest(absl::Duration now) const {
  std::optional<Estimate> slowest;
  for (const auto& [key, pair] : pairs_) {
    std::optional<Estimate> e = EstimateOf(pair, now);
    if (!e.has_value()) continue;
    if (!slowest.has_value() || e->bytes_per_second < slowest->bytes_per_second) {
      e->a = RankId(key.first);
      e->b = RankId(key.second);
      slowest = e;
    }
  }
  return slowest;
}

const char* LinkBasisName(LinkModel::Basis basis) {
  switch (basis) {
    case LinkModel::Basis::kLearned:
      return "learned";
    case LinkModel::Basis::kStale:
      return "stale";
    case LinkModel::Basis::kRelearning:
      return "relearning";
  }
  return "unknown";
}

void LinkModel::ForgetRank(RankId rank) {
  std::erase_if(pairs_, [rank](const auto& entry) {
    return entry.first.first == rank.value() || entry.first.second == rank.value();
  });
}

}  // namespace ballast::coordinator
