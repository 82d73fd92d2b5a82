#!/usr/bin/env bash
# The shipped binaries with transport security and admin authorisation, on loopback, with
# certificates made now by make_test_certs.sh (openssl):
#   - the coordinator refuses an open admin API on 0.0.0.0, and an empty token file;
#   - mTLS: an agent with a cluster certificate connects; ballastctl works with an allowed
#     CN or the token, and fails clearly (exit 1) without them; the plaintext health port
#     (--health_listen) serves no admin API;
#   - server-only TLS: ballastctl without --token_file gets UNAUTHENTICATED.
#   binaries_tls_test.sh COORDINATOR AGENT BALLASTCTL MAKE_TEST_CERTS
set -euo pipefail
coordinator_bin=$1 agent_bin=$2 ctl_bin=$3 make_certs=$4
dir=$(mktemp -d)
pids=()
source "$(dirname "${BASH_SOURCE[0]}")/../testing/shell_helpers.sh"  # fail, free_port, wait_for
trap 'stop_started; rm -rf "$dir"' EXIT

# expect_exit CODE PATTERN COMMAND...: the command exits with CODE and its stderr matches.
expect_exit() {
  local want=$1 pattern=$2 code=0
  shift 2
  "$@" >/dev/null 2>"$dir/err" || code=$?
  [ "$code" = "$want" ] || fail "exit code $code (wanted $want): $* : $(cat "$dir/err")"
  grep -q -- "$pattern" "$dir/err" || fail "no '$pattern' in: $(cat "$dir/err")"
}

bash "$make_certs" "$dir/certs" >/dev/null
c=$dir/certs
printf 'bin-test-token\n' >"$dir/token"
printf 'wrong-token\n' >"$dir/wrong"
: >"$dir/empty"

# Refusals at start: non-zero exit and a message naming the flags.
port=$(free_port)
expect_exit 1 "--allow_insecure_admin" timeout 20 "$coordinator_bin" --listen="0.0.0.0:$port" \
  --metrics= --store="$dir/refused.db"
expect_exit 1 "--allow_insecure_agents" timeout 20 "$coordinator_bin" --listen="0.0.0.0:$port" \
  --metrics= --store="$dir/refused.db" --admin_token_file="$dir/token"
expect_exit 1 "--admin_token_file: token file '$dir/empty' is empty" timeout 20 "$coordinator_bin" \
  --listen="127.0.0.1:$port" --metrics= --store="$dir/refused.db" --admin_token_file="$dir/empty"
expect_exit 1 "needs --tls_client_ca" timeout 20 "$coordinator_bin" --listen="127.0.0.1:$port" \
  --metrics= --store="$dir/refused.db" --tls_cert="$c/server.crt" --tls_key="$c/server.key" \
  --admin_allowed_cns=ballastctl-admin

# mTLS, the token, and one allowed CN (the space after the comma is trimmed); a plaintext
# health-only port beside it.
metrics=$(free_port) agent_metrics=$(free_port) health_port=$(free_port)
"$coordinator_bin" --listen="127.0.0.1:$port" --metrics="127.0.0.1:$metrics" \
  --health_listen="127.0.0.1:$health_port" \
  --store="$dir/coordinator.db" --tls_cert="$c/server.crt" --tls_key="$c/server.key" \
  --tls_client_ca="$c/ca.crt" --admin_token_file="$dir/token" \
  --admin_allowed_cns="ops, ballastctl-admin" 2>>"$dir/coordinator.log" &
pids+=($!)
ctl() { "$ctl_bin" --coordinator="127.0.0.1:$port" --timeout=2s --tls_ca="$c/ca.crt" "$@"; }
as_admin=(--tls_cert="$c/admin.crt" --tls_key="$c/admin.key")
as_agent=(--tls_cert="$c/agent.crt" --tls_key="$c/agent.key")
wait_for "the mTLS coordinator" ctl "${as_admin[@]}" status

"$agent_bin" --coordinator="127.0.0.1:$port" --socket="$dir/agent.sock" --node=node-1 \
  --metrics="127.0.0.1:$agent_metrics" --tls_ca="$c/ca.crt" --tls_cert="$c/agent.crt" \
  --tls_key="$c/agent.key" 2>>"$dir/agent.log" &
agent_pid=$!
pids+=("$agent_pid")
wait_for "the agent's socket" test -S "$dir/agent.sock"
[ "$(stat -c %a "$dir/agent.sock")" = 660 ] || fail "agent socket is not mode 0660"
wait_for "the agent's mTLS session" bash -c "$(declare -f ctl); ctl_bin='$ctl_bin' port=$port c='$c'; \
  ctl --tls_cert='$c/admin.crt' --tls_key='$c/admin.key' status | grep -q 'agents 1'"

ctl "${as_admin[@]}" --preconfigure policy set vit mode=migrate >/dev/null ||
  fail "allowed CN refused"
ctl "${as_agent[@]}" --token_file="$dir/token" status | grep -q "agents 1" || fail "token refused"
expect_exit 1 "PERMISSION_DENIED: client certificate CN 'agent-node1'" ctl "${as_agent[@]}" status
expect_exit 1 "PERMISSION_DENIED: admin token rejected" \
  ctl "${as_agent[@]}" --token_file="$dir/wrong" status
expect_exit 1 "UNAVAILABLE" ctl --token_file="$dir/token" status          # no client cert
expect_exit 1 "UNAVAILABLE" "$ctl_bin" --coordinator="127.0.0.1:$port" --timeout=2s \
  --tls_ca="$c/ca.crt" --tls_cert="$c/rogue.crt" --tls_key="$c/rogue.key" \
  --token_file="$dir/token" status                                        # another CA
expect_exit 2 "--token_file: token file '$dir/missing'" \
  ctl "${as_agent[@]}" --token_file="$dir/missing" status
expect_exit 2 "does not match" ctl --tls_cert="$c/agent.crt" --tls_key="$c/admin.key" status
grep -q "admin call denied: method=GetStatus .* cn=agent-node1 reason=cn_not_allowed" \
  "$dir/coordinator.log" || fail "denial not logged"
! grep -q "bin-test-token\|wrong-token" "$dir/coordinator.log" || fail "a token was logged"
# The plaintext health port answers gRPC without a certificate, but only grpc.health.v1:
# the admin API is not there, token or not.
grep -q "plaintext health on port $health_port" "$dir/coordinator.log" ||
  fail "no plaintext health port in the coordinator's log"
expect_exit 1 "UNIMPLEMENTED" "$ctl_bin" --coordinator="127.0.0.1:$health_port" --timeout=2s \
  --token_file="$dir/token" status
wait_for "the denial in the metrics" bash -c "curl -sf http://127.0.0.1:$metrics/metrics | \
  grep -q 'ballast_coordinator_admin_requests_denied_total{reason=\"cn_not_allowed\"} 1'"

# Server-only TLS: anyone may connect, admin calls need the token.
tls_port=$(free_port)
"$coordinator_bin" --listen="127.0.0.1:$tls_port" --metrics= --store="$dir/tls.db" \
  --tls_cert="$c/server.crt" --tls_key="$c/server.key" --admin_token_file="$dir/token" \
  2>>"$dir/coordinator-tls.log" &
tls_pid=$!
pids+=("$tls_pid")
tls_ctl() { "$ctl_bin" --coordinator="127.0.0.1:$tls_port" --timeout=2s --tls_ca="$c/ca.crt" "$@"; }
wait_for "the TLS coordinator" tls_ctl --token_file="$dir/token" status
expect_exit 1 "UNAUTHENTICATED: .*pass --token_file" tls_ctl status
expect_exit 1 "UNAVAILABLE" "$ctl_bin" --coordinator="127.0.0.1:$tls_port" --timeout=2s \
  --token_file="$dir/token" status                                        # plaintext client

kill -TERM "${pids[@]}"
for pid in "${pids[@]}"; do wait "$pid" || fail "exit code $? from $pid"; done
pids=()
echo "binaries TLS test: 1 passed, 0 failed"
