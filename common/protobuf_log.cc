#include "common/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>

#include <string>

#include "common/logging.h"

namespace ballast {

std::optional<int64_t> LogRateLimiter::Admit() {
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  if (!window_start_.has_value() || now - *window_start_ >= window_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= max_lines_) {
    ++suppressed_since_;
    ++suppressed_;
    return std::nullopt;
  }
  ++in_window_;
  ++forwarded_;
  const int64_t suppressed = suppressed_since_;
  suppressed_since_ = 0;
  return suppressed;
}

int64_t LogRateLimiter::forwarded() const {
  absl::MutexLock lock(&mu_);
  return forwarded_;
}

int64_t LogRateLimiter::suppressed() const {
  absl::MutexLock lock(&mu_);
  return suppressed_;
}

namespace {

LogRateLimiter* limiter = nullptr;

void ForwardProtobufLine(google::protobuf::LogLevel level, const char* filename, int line,
                         const std::string& message) {
  // A fatal line is protobuf's last word before it aborts: never suppressed.
  const std::optional<int64_t> suppressed =
      level >= google::protobuf::LOGLEVEL_FATAL ? std::optional<int64_t>(0) : limiter->Admit();
  if (!suppressed.has_value()) return;
  const LogSeverity severity = level >= google::protobuf::LOGLEVEL_ERROR     ? LogSeverity::kError
                               : level == google::protobuf::LOGLEVEL_WARNING ? LogSeverity::kWarning
                                                                             : LogSeverity::kInfo;
  if (severity < MinLogSeverity()) return;
  internal::LogMessage out(severity, filename, line);
  out.stream() << "libprotobuf: " << message;
  if (*suppressed > 0) {
    out.stream() << " (" << *suppressed << " libprotobuf lines suppressed before this one)";
  }
}

}  // namespace

const LogRateLimiter& RateLimitProtobufLogs(int32_t max_lines, absl::Duration window) {
  if (limiter == nullptr) {
    limiter = new LogRateLimiter(RealClock(), max_lines, window);  // lives as long as main
    google::protobuf::SetLogHandler(&ForwardProtobufLine);
  }
  return *limiter;
}

}  // namespace ballast
