# Helpers shared by the shell tests (tests/integration/binaries_test.sh, tests/deploy/*.sh).
# Source it after `set -euo pipefail`; it reads two variables of the sourcing script:
#   dir   its temp directory: on failure the last lines of every $dir/*.log are shown
#   pids  an array of the background processes it started: wait_for fails at once when one
#         of them has exited, and stop_started stops them
#
#   dir=$(mktemp -d); pids=()
#   source "$src/tests/testing/shell_helpers.sh"
#   trap 'stop_started; rm -rf "$dir"' EXIT
#   port=$(free_port)
#   daemon --listen=127.0.0.1:$port 2>"$dir/daemon.log" & pids+=($!)
#   wait_for "the daemon" curl -sf "http://127.0.0.1:$port/"

# Prints FAIL and the logs' last lines to stderr, and exits 1.
fail() {
  echo "FAIL: $*" >&2
  local log
  for log in "${dir:-/nonexistent}"/*.log; do
    [ -s "$log" ] && { echo "--- last lines of $(basename "$log")" >&2; tail -n 15 "$log" >&2; }
  done
  exit 1
}

# A loopback port nothing listens on (bash's /dev/tcp connect fails). Drawn below Linux's
# ephemeral range (ip_local_port_range, 32768-60999 by default), so that no port the kernel
# hands out meanwhile (a client connection's, another process's bind to port 0) takes it
# before the daemon binds it.
free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 10100 ] 2>/dev/null || low=32768
  for p in $(shuf -i "10000-$((low - 1))" -n 50); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  fail "no free port"
}

# wait_for WHAT COMMAND...: runs COMMAND every 0.1 s until it succeeds, for at most
# $WAIT_FOR_SECONDS (default 30: the machine may be shared and slow); fails at once if a
# process in pids has exited.
wait_for() {
  local what=$1; shift
  local _ pid
  for _ in $(seq 1 $((${WAIT_FOR_SECONDS:-30} * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null || fail "a process exited while waiting for $what"
    done
    sleep 0.1
  done
  fail "timed out waiting for $what"
}

# Stops every process in pids (SIGTERM) and reaps it.
stop_started() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
