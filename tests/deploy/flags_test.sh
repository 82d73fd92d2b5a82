#!/usr/bin/env bash
# The configuration files match the binaries:
#  - deploy/config/<binary>.flags documents every flag the binary has, each at its real
#    default, and names no flag it lacks;
#  - the Kubernetes ConfigMaps and pod args, and the systemd units, use only real flags;
#  - each reference file really starts its binary (abseil --flagfile), with only ports
#    and paths overridden.
#
#   flags_test.sh SOURCE_DIR COORDINATOR AGENT BALLASTCTL
set -euo pipefail
src=$1 coordinator_bin=$2 agent_bin=$3 ctl_bin=$4
PYTHON=${PYTHON:-/usr/bin/python3}
check="$PYTHON $src/tests/deploy/deploy_checks.py flags"
dir=$(mktemp -d)
pids=()
source "$(dirname "${BASH_SOURCE[0]}")/../testing/shell_helpers.sh"  # fail, free_port, wait_for
trap 'stop_started; rm -rf "$dir"' EXIT

$check ballast-coordinator "$coordinator_bin" "$src/deploy/config/coordinator.flags" \
  "$src/deploy/kubernetes/coordinator-config.yaml" "$src/deploy/kubernetes/coordinator.yaml" \
  "$src/deploy/systemd/ballast-coordinator.service" "$src/deploy/systemd/ballast-coordinator.env" ||
  fail "ballast-coordinator's flags and their documentation disagree (above)"
$check ballast-agent "$agent_bin" "$src/deploy/config/agent.flags" \
  "$src/deploy/kubernetes/agent-config.yaml" "$src/deploy/kubernetes/agent.yaml" \
  "$src/deploy/systemd/ballast-agent.service" "$src/deploy/systemd/ballast-agent.env" ||
  fail "ballast-agent's flags and their documentation disagree (above)"
$check ballastctl "$ctl_bin" "$src/deploy/config/ballastctl.flags" ||
  fail "ballastctl's flags and their documentation disagree (above)"

port=$(free_port) metrics=$(free_port) agent_metrics=$(free_port)
"$coordinator_bin" --flagfile="$src/deploy/config/coordinator.flags" --listen="127.0.0.1:$port" \
  --metrics="127.0.0.1:$metrics" --store="$dir/coordinator.db" 2>"$dir/coordinator.log" &
pids+=($!)
ctl() { "$ctl_bin" --flagfile="$src/deploy/config/ballastctl.flags" --coordinator="127.0.0.1:$port" "$@"; }
wait_for "the coordinator started from coordinator.flags" ctl status
"$agent_bin" --flagfile="$src/deploy/config/agent.flags" --coordinator="127.0.0.1:$port" \
  --socket="$dir/agent.sock" --metrics="127.0.0.1:$agent_metrics" 2>"$dir/agent.log" &
pids+=($!)
wait_for "the agent started from agent.flags" bash -c \
  "$(declare -f ctl); ctl_bin='$ctl_bin' src='$src' port=$port; ctl status | grep -q 'agents 1'"
echo "flags test: 1 passed, 0 failed"
