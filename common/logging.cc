#include "common/logging.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ballast {
namespace {

LogSeverity SeverityFromEnv() {
  const char* level = std::getenv("BALLAST_LOG_LEVEL");
  if (level == nullptr) return LogSeverity::kInfo;
  if (std::strcmp(level, "warning") == 0) return LogSeverity::kWarning;
  if (std::strcmp(level, "error") == 0) return LogSeverity::kError;
  return LogSeverity::kInfo;
}

std::atomic<int>& MinSeverityStorage() {
  static std::atomic<int> severity(static_cast<int>(SeverityFromEnv()));
  return severity;
}

const char* SeverityTag(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return "I";
    case LogSeverity::kWarning:
      return "W";
    case LogSeverity::kError:
      return "E";
  }
  return "?";
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  MinSeverityStorage().store(static_cast<int>(severity));
}

LogSeverity MinLogSeverity() { return static_cast<LogSeverity>(MinSeverityStorage().load()); }

namespace internal {

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  const char* base = std::strrchr(file, '/');
  stream_ << SeverityTag(severity_) << " "
          << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()) << " "
          << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  // One write per line so lines from concurrent ranks do not interleave mid-line.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cerr << stream_.str() << std::flush;
}

}  // namespace internal
}  // namespace ballast
