#include "worker_lib/internal/emulated_slowdown.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ballast::internal {
namespace {

// Redundant arithmetic that the compiler must keep: a few independent multiply-add chains
// on a small array, converging to 1 (no denormals, no overflow), whose state persists in
// the wrapper from call to call. One chunk is a few microseconds on a 2020s core: short
// enough that a section overshoots its target by little, long enough that reading the
// clock after each is noise.
class Burner {
 public:
  void Chunk() {
    for (int i = 0; i < kIterations; ++i) {
      for (float& v : lanes_) v = v * 0.999f + 0.001f;
    }
    sink_ = lanes_[0];
  }

 private:
  static constexpr int kIterations = 512;
  std::array<float, 16> lanes_{0.5f, 0.25f, 0.75f, 0.125f, 0.5f, 0.25f, 0.75f, 0.125f,
                               0.5f, 0.25f, 0.75f, 0.125f, 0.5f, 0.25f, 0.75f, 0.125f};
  volatile float sink_ = 0;
};

// The wrapper that burns inside the wrapped timer's span, measuring with that timer itself:
// the compute seconds read factor x what they would have, on whatever clock the backend
// times with (a test's thread-CPU clock included).
class SlowedTimer final : public IntervalTimer {
 public:
  SlowedTimer(std::unique_ptr<IntervalTimer> timer, const EmulatedSlowdown* slowdown)
      : timer_(std::move(timer)), slowdown_(slowdown) {}

  void Start() override {
    // The running total, cheap on the CPU backend's clock timer (the only one wrapped).
    absl::StatusOr<double> total = timer_->Seconds();
    before_ = total.ok() ? *total : -1;
    timer_->Start();
  }

  void Stop() override {
    timer_->Stop();
    const double factor = slowdown_->factor();
    if (factor <= 1.0 || before_ < 0) return;
    absl::StatusOr<double> total = timer_->Seconds();
    if (!total.ok()) return;
    const double section = *total - before_;
    if (!(section > 0)) return;
    const double target = *total + (factor - 1.0) * section;
    // Bounded in real time as well, in case the timer's clock stands still while the
    // section's did not (a fake clock another thread moves): never a hang.
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::duration<double>(4.0 * (target - *total) + 0.1);
    for (;;) {
      timer_->Start();
      burner_.Chunk();
      timer_->Stop();
      total = timer_->Seconds();
      if (!total.ok() || *total >= target || std::chrono::steady_clock::now() > give_up) break;
    }
  }

  absl::StatusOr<double> Seconds() override { return timer_->Seconds(); }
  void Reset() override { timer_->Reset(); }

 private:
  std::unique_ptr<IntervalTimer> timer_;
  const EmulatedSlowdown* slowdown_;
  double before_ = -1;
  Burner burner_;
};

}  // namespace

EmulatedSlowdown::EmulatedSlowdown(std::string path, std::string who)
    : path_(std::move(path)), who_(std::move(who)) {}

absl::StatusOr<double> EmulatedSlowdown::ParseFactor(absl::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  double factor = 0;
  if (stripped.empty() || !absl::SimpleAtod(stripped, &factor) || !std::isfinite(factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", absl::CEscape(text.substr(0, 32)), "\" is not a number"));
  }
  if (factor < 1.0 || factor > kMaxFactor) {
    return absl::InvalidArgumentError(
        absl::StrCat("slowdown ", factor, " out of range [1, ", kMaxFactor, "]"));
  }
  return factor;
}

absl::StatusOr<EmulatedSlowdown::Setting> EmulatedSlowdown::ParseSetting(absl::string_view text) {
  const size_t at = text.find('@');
  Setting setting;
  BALLAST_ASSIGN_OR_RETURN(setting.factor, ParseFactor(text.substr(0, at)));
  if (at == absl::string_view::npos) return setting;
  const absl::string_view step = absl::StripAsciiWhitespace(text.substr(at + 1));
  if (!absl::SimpleAtoi(step, &setting.from_step) || setting.from_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", absl::CEscape(step.substr(0, 32)), "\" after '@' is not a step"));
  }
  return setting;
}

absl::StatusOr<EmulatedSlowdown::Setting> EmulatedSlowdown::ReadSetting() const {
  std::ifstream in(path_);
  if (!in) {
    if (errno == ENOENT) return Setting{};
    return absl::FailedPreconditionError(absl::StrCat("cannot read: ", std::strerror(errno)));
  }
  std::string text(64, '\0');  // a number and blanks; more is not a factor file
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseSetting(text);
}

void EmulatedSlowdown::Refresh(int64_t step) {
  errno = 0;
  absl::StatusOr<Setting> read = ReadSetting();
  double factor = 1.0;
  if (read.ok()) {
    // A setting for a later step: the factor in force holds until then.
    factor = step >= read->from_step ? read->factor : factor_;
    error_logged_ = false;
  } else if (!error_logged_) {
    BALLAST_LOG(ERROR) << who_ << " step=" << step << " emulated slowdown file " << path_ << ": "
                       << read.status().message() << "; running at full speed until it is fixed";
    error_logged_ = true;
  }
  if (factor != factor_) {
    BALLAST_LOG(INFO) << who_ << " step=" << step << " emulated slowdown " << factor_ << "x -> "
                      << factor << "x (block compute only)";
    factor_ = factor;
  }
}

std::unique_ptr<IntervalTimer> EmulatedSlowdown::WrapTimer(std::unique_ptr<IntervalTimer> timer) {
  return std::make_unique<SlowedTimer>(std::move(timer), this);
}

}  // namespace ballast::internal
