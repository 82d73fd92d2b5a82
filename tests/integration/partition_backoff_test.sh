#!/usr/bin/env bash
# A real partition (issue 38): the coordinator in one network namespace, the agent in
# another, joined by a veth pair (shaped_link.sh; the shaping is irrelevant here). The link
# is cut with `ip link set down` on the agent's side for ~8 s after the agent noticed, then
# restored. Checks, from the logs of the real binaries:
#   - the agent noticed the cut (keepalive) and logged a bounded number of lines meanwhile
#     (the loss, then attempts 2, 4, 8...: its retries follow the growing backoff);
#   - the coordinator saw the agent's hello again within one max backoff (plus 3 s slack for
#     a loaded machine) of the link's return, and the agent logged "reconnected after N
#     attempts" with N small.
# Skips (exit 77) where namespaces cannot be made (not root, no iproute2, no netns/veth).
#   partition_backoff_test.sh COORDINATOR AGENT
set -euo pipefail
coordinator_bin=${1:?usage: partition_backoff_test.sh COORDINATOR AGENT} agent_bin=${2:?}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
pids=()
# shellcheck source=tests/testing/shell_helpers.sh
source "$here/../testing/shell_helpers.sh"  # fail, wait_for, stop_started
# shellcheck source=tests/integration/shaped_link.sh
source "$here/shaped_link.sh"
prefix="ballast-pb$$"
# Processes first: a namespace lives on, nameless, while a process is still in it.
trap 'stop_started; shaped_link_down "$prefix"; rm -rf "$dir"' EXIT
if ! shaped_link_up "$prefix" 1000 2>"$dir/link.err"; then
  echo "SKIP: cannot make the network namespaces: $(cat "$dir/link.err")"
  exit 77
fi
agent_ns="${prefix}a" coordinator_ns="${prefix}b"
max_backoff_s=2
cut_after_loss_s=8
coordinator="$SHAPED_LINK_ADDR_B:7070"

# Seconds since the epoch of a log line's timestamp ("I 2026-11-28T00:10:58.172Z ...").
log_time() { date -d "$(awk '{print $2}' <<<"$1")" +%s.%N; }
now() { date +%s.%N; }
lines() { wc -l <"$dir/agent.log"; }

ip netns exec "$coordinator_ns" "$coordinator_bin" --listen="$coordinator" --metrics= \
  --store="$dir/coordinator.db" --allow_insecure_admin --allow_insecure_agents \
  2>"$dir/coordinator.log" &
pids+=($!)
# Keepalive 5 s (the coordinator accepts pings every 5 s): the cut is noticed within ~10 s.
ip netns exec "$agent_ns" "$agent_bin" --coordinator="$coordinator" --socket="$dir/agent.sock" \
  --node=node-1 --metrics= --reconnect_initial_backoff=100ms \
  --reconnect_max_backoff="${max_backoff_s}s" --coordinator_keepalive=5s 2>"$dir/agent.log" &
pids+=($!)
WAIT_FOR_SECONDS=20 wait_for "the agent's session" grep -q "connected to coordinator" "$dir/agent.log"

before=$(lines)
ip -n "$agent_ns" link set "$SHAPED_LINK_DEV" down
WAIT_FOR_SECONDS=20 wait_for "the agent to notice the cut" grep -q "lost coordinator" "$dir/agent.log"
sleep "$cut_after_loss_s"  # the outage itself: the agent retries on its backoff meanwhile
during=$(($(lines) - before))
coordinator_hellos=$(grep -c "agent=node-1 .*connected with" "$dir/coordinator.log" || true)
up_at=$(now)
ip -n "$agent_ns" link set "$SHAPED_LINK_DEV" up
WAIT_FOR_SECONDS=15 wait_for "the agent to reconnect" \
  bash -c "tail -n +$((before + 1)) '$dir/agent.log' | grep -q 'reconnected to coordinator'"

echo "--- agent log from the cut on"
tail -n +"$((before + 1))" "$dir/agent.log"
# The coordinator's first hello after the link came back: when the agent was back.
hello=$(grep "agent=node-1 .*connected with" "$dir/coordinator.log" | sed -n "$((coordinator_hellos + 1))p")
[ -n "$hello" ] || fail "the coordinator never saw the agent's hello again"
back_after=$(echo "$(log_time "$hello") - $up_at" | bc -l)
attempts=$(tail -n +"$((before + 1))" "$dir/agent.log" | grep -o "reconnected to coordinator .* after [0-9]*" |
  tail -1 | awk '{print $NF}')
printf 'log lines during the cut: %d; back %.2fs after the link returned; %d attempts in the outage\n' \
  "$during" "$back_after" "$attempts"

# Bounds. Lines: the loss and attempts 2, 4, 8 and 16 at most (~10 attempts in ~8 s at a
# 2 s cap), where a backoff reset on every new stream logged 20-40 lines a second.
[ "$during" -le 10 ] || fail "$during agent log lines during the cut (want <= 10)"
[ "$attempts" -le 30 ] || fail "$attempts reconnect attempts in ~${cut_after_loss_s}s (want <= 30)"
# Back within one max backoff of the link's return; +3 s for the link to come up and a
# loaded machine (CI runs this under ASan too). gRPC's own reconnect backoff, which a
# shared subchannel would add, grows to 120 s.
awk -v t="$back_after" -v m="$max_backoff_s" 'BEGIN { exit !(t <= m + 3) }' ||
  fail "the agent came back ${back_after}s after the link (want <= ${max_backoff_s}s + 3s)"
echo "PASS"
