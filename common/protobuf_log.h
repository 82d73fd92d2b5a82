// libprotobuf's own log lines, rate-limited. Protobuf logs an ERROR line for every
// message it parses with invalid UTF-8 in a string field, before any handler or
// authentication runs (gRPC answers the call with INVALID_ARGUMENT, see
// coordinator/server.cc): anyone who can reach a port could fill the log (3,014 of 5,116
// lines in one run). Installed by the binaries' mains, the handler forwards at most
// `max_lines` lines a `window` to our log, and says how many it suppressed in the next
// line it forwards.
//
//   int main(...) { ballast::RateLimitProtobufLogs(); ... }
#ifndef BALLAST_COMMON_PROTOBUF_LOG_H_
#define BALLAST_COMMON_PROTOBUF_LOG_H_

#include <cstdint>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace ballast {

// At most `max_lines` admitted a `window` (a fixed window on the clock's monotonic time).
// Thread-safe.
class LogRateLimiter {
 public:
  LogRateLimiter(Clock* clock, int32_t max_lines, absl::Duration window)
      : clock_(clock), max_lines_(max_lines), window_(window) {}
  // Whether to write a line now; when it is, how many were suppressed since the last one
  // written (0 for none).
  std::optional<int64_t> Admit();
  int64_t forwarded() const;
  int64_t suppressed() const;  // in all

 private:
  Clock* const clock_;
  const int32_t max_lines_;
  const absl::Duration window_;
  mutable absl::Mutex mu_;
  std::optional<absl::Duration> window_start_ ABSL_GUARDED_BY(mu_);
  int32_t in_window_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_since_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t forwarded_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

// Routes libprotobuf's log lines through a LogRateLimiter on the real clock into our log.
// Call once, early in main (protobuf's SetLogHandler is not thread-safe); later calls
// change nothing. Returns the limiter, for its counts.
const LogRateLimiter& RateLimitProtobufLogs(int32_t max_lines = 10,
                                            absl::Duration window = absl::Minutes(1));

}  // namespace ballast

#endif  // BALLAST_COMMON_PROTOBUF_LOG_H_
