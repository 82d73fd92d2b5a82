// Operator-facing log lines. Abseil 20220623 (Debian 12) has no absl/log, so Ballast
// carries this minimal stream logger: one line per event, to stderr, with a severity,
// a UTC timestamp and the source location.
//
//   BALLAST_LOG(INFO) << "group=" << group << " rank=" << rank << " applied plan v" << v;
#ifndef BALLAST_COMMON_LOGGING_H_
#define BALLAST_COMMON_LOGGING_H_

#include <sstream>

namespace ballast {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

// Messages below this severity are dropped. Default kInfo; BALLAST_LOG_LEVEL=warning|error
// in the environment raises it.
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

namespace internal {
class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace ballast

#define BALLAST_LOG_SEVERITY_INFO ::ballast::LogSeverity::kInfo
#define BALLAST_LOG_SEVERITY_WARNING ::ballast::LogSeverity::kWarning
#define BALLAST_LOG_SEVERITY_ERROR ::ballast::LogSeverity::kError

#define BALLAST_LOG(severity)                                                   \
  if (BALLAST_LOG_SEVERITY_##severity < ::ballast::MinLogSeverity()) {          \
  } else                                                                        \
    ::ballast::internal::LogMessage(BALLAST_LOG_SEVERITY_##severity, __FILE__,  \
                                    __LINE__)                                   \
        .stream()

#endif  // BALLAST_COMMON_LOGGING_H_
