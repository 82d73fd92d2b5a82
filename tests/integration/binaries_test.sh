#!/usr/bin/env bash
# The shipped binaries as real processes on loopback: ballast-coordinator, ballast-agent
# and ballastctl, including a coordinator kill -9 and restart over the same store.
#   binaries_test.sh COORDINATOR AGENT BALLASTCTL
set -euo pipefail
coordinator_bin=$1 agent_bin=$2 ctl_bin=$3
dir=$(mktemp -d)
pids=()
source "$(dirname "${BASH_SOURCE[0]}")/../testing/shell_helpers.sh"  # fail, free_port, wait_for
trap 'stop_started; rm -rf "$dir"' EXIT

port=$(free_port) metrics=$(free_port) agent_metrics=$(free_port)
ctl() { "$ctl_bin" --coordinator="127.0.0.1:$port" --timeout=2s "$@"; }

start_coordinator() {
  "$coordinator_bin" --listen="127.0.0.1:$port" --metrics="127.0.0.1:$metrics" \
    --store="$dir/coordinator.db" 2>>"$dir/coordinator.log" &
  coordinator_pid=$!
  pids+=("$coordinator_pid")
  wait_for "the coordinator" ctl status
}

# A bad flag value: exit code 2, the flag and the accepted values named, no store created.
set +e
# (timeout, ports of its own: were the value taken, it would serve, and the test must not hang)
timeout 20 "$coordinator_bin" --throttled_price=sometimes --listen="127.0.0.1:$(free_port)" \
  --metrics="127.0.0.1:$(free_port)" --store="$dir/bad/coordinator.db" 2>"$dir/err"
code=$?
set -e
[ "$code" = 2 ] || fail "--throttled_price=sometimes exit code $code: $(cat "$dir/err")"
grep -q "throttled price 'sometimes' is not one of timers, step, floor" "$dir/err" ||
  fail "unclear error: $(cat "$dir/err")"
[ ! -e "$dir/bad" ] || fail "a usage error created the store's directory"

start_coordinator
"$agent_bin" --coordinator="127.0.0.1:$port" --socket="$dir/agent.sock" --node=node-1 \
  --metrics="127.0.0.1:$agent_metrics" 2>>"$dir/agent.log" &
agent_pid=$!
pids+=("$agent_pid")
wait_for "the agent's socket" test -S "$dir/agent.sock"
[ "$(stat -c %a "$dir/agent.sock")" = 660 ] || fail "agent socket is not mode 0660"
wait_for "the agent's session" bash -c "$(declare -f ctl); ctl_bin='$ctl_bin' port=$port; ctl status | grep -q 'agents 1'"

# Policies: set ahead of the job's start (only when asked: a typo configures nothing),
# read back, refused with a clear error.
if ctl policy set vit mode=migrate 2>"$dir/err"; then fail "unknown job configured"; fi
grep -q "NOT_FOUND: job 'vit' unknown" "$dir/err" || fail "unknown job: $(cat "$dir/err")"
if ctl pause vit 2>"$dir/err"; then fail "unknown job paused"; fi
grep -q "NOT_FOUND: job 'vit' is not known" "$dir/err" || fail "unknown job: $(cat "$dir/err")"
if ctl uncordon node-9/gpu0 2>"$dir/err"; then fail "uncordoned what was not cordoned"; fi
grep -q "NOT_FOUND: device 'node-9/gpu0' is not cordoned" "$dir/err" || fail "$(cat "$dir/err")"
ctl --preconfigure policy set vit mode=migrate report_period_ms=300 >/dev/null
ctl policy get vit | grep -q "mode *migrate" || fail "policy not stored"
if ctl policy set vit max_pruned_fraction_rank=2 2>"$dir/err"; then fail "bad policy accepted"; fi
grep -q "INVALID_ARGUMENT: max_pruned_fraction_rank 2" "$dir/err" || fail "unclear error: $(cat "$dir/err")"
if ctl explain vit nosuchgroup 2>"$dir/err"; then fail "unknown group explained"; fi
grep -q "NOT_FOUND" "$dir/err" || fail "unknown group: $(cat "$dir/err")"
set +e; ctl frobnicate 2>/dev/null; code=$?; set -e
[ "$code" = 2 ] || fail "unknown command exit code $code"
set +e; ctl --timeout=-1 status 2>"$dir/err"; code=$?; set -e
[ "$code" = 2 ] || fail "--timeout=-1 exit code $code: $(cat "$dir/err")"

ctl pause >/dev/null
ctl status | grep -q "balancing PAUSED" || fail "pause not shown"
ctl resume >/dev/null
ctl cordon node-1/gpu0 ECC errors >/dev/null
ctl --json status | grep -q '"node-1/gpu0"' || fail "cordon not in JSON status"

# Metrics from both daemons.
# In `bash -c`, without pipefail: grep -q may stop reading early, and curl's SIGPIPE must
# not count as a failure. Waiting also covers /metrics opening just after the gRPC port.
wait_for "the coordinator's metrics" bash -c "curl -sf http://127.0.0.1:$metrics/metrics | grep -q '^ballast_build_info'"
wait_for "the agent's metrics" bash -c "curl -sf http://127.0.0.1:$agent_metrics/metrics | grep -q 'ballast_agent_coordinator_connected{node=\"node-1\"} 1'"

# Kill -9 the coordinator and restart it on the same store: nothing an operator set is lost,
# and the agent reconnects by itself.
kill -9 "$coordinator_pid"
wait "$coordinator_pid" 2>/dev/null || true
pids=("$agent_pid")  # wait_for fails when a process in pids has exited
start_coordinator
ctl policy get vit | grep -q "report_period_ms *300" || fail "policy lost over restart"
ctl status | grep -q "cordoned node-1/gpu0" || fail "cordon lost over restart"
wait_for "the agent's session" bash -c "$(declare -f ctl); ctl_bin='$ctl_bin' port=$port; ctl status | grep -q 'agents 1'"

# A clean stop: SIGTERM, exit 0, the agent removes its socket.
kill -TERM "$agent_pid" "$coordinator_pid"
wait "$agent_pid" || fail "agent exit code $?"
wait "$coordinator_pid" || fail "coordinator exit code $?"
[ ! -e "$dir/agent.sock" ] || fail "agent left its socket behind"
echo "binaries smoke test: 1 passed, 0 failed"
