// The one keepalive rule both ends of the agent -> coordinator stream share: the
// coordinator refuses HTTP/2 pings more often than this (a client pinging faster is
// closed with "too many pings"), so the agent may not be configured to ping faster. An
// agent closed that way would reconnect, be welcomed, reset its backoff and be closed
// again: a reconnect loop at the ping interval.
#ifndef BALLAST_COMMON_KEEPALIVE_H_
#define BALLAST_COMMON_KEEPALIVE_H_

#include "absl/time/time.h"

namespace ballast {

inline constexpr absl::Duration kMinKeepaliveInterval = absl::Seconds(5);

}  // namespace ballast

#endif  // BALLAST_COMMON_KEEPALIVE_H_
