#!/usr/bin/env bash
# The systemd units: `systemd-analyze verify` (no warnings allowed), their hardening
# scored with `systemd-analyze security --offline`, and the directives issue 5 asks for.
# Where systemd-analyze cannot run (no systemd in a container), a parse check stands in.
#
#   systemd_units_test.sh SOURCE_DIR COORDINATOR AGENT
set -euo pipefail
src=$1
coordinator_bin=$(realpath "$2") agent_bin=$(realpath "$3")
PYTHON=${PYTHON:-/usr/bin/python3}
# The highest exposure score accepted (systemd calls <= 1.9 "OK", < 5 "MEDIUM"); the units
# score 1.4-1.5 today, so dropping a hardening option fails here.
MAX_EXPOSURE=2.0
units=(ballast-coordinator.service ballast-agent.service)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# verify checks that ExecStart's binary exists: point it at the freshly built ones.
sed "s|/usr/local/bin/ballast-coordinator|$coordinator_bin|" \
  "$src/deploy/systemd/ballast-coordinator.service" >"$dir/ballast-coordinator.service"
sed "s|/usr/local/bin/ballast-agent|$agent_bin|" \
  "$src/deploy/systemd/ballast-agent.service" >"$dir/ballast-agent.service"

# Directives every unit must keep (why: docs/operations.md#systemd).
for unit in "${units[@]}"; do
  for directive in 'NoNewPrivileges=yes' 'ProtectSystem=strict' 'PrivateTmp=yes' \
      'CapabilityBoundingSet=$' 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6$' \
      'SystemCallFilter=@system-service' 'User=ballast' 'Group=ballast' 'Restart=on-failure' \
      'EnvironmentFile=' 'ExecStart=.* --flagfile=/etc/ballast/'; do
    grep -Eq "^$directive" "$src/deploy/systemd/$unit" || fail "$unit lacks $directive"
  done
done
grep -q '^StateDirectory=ballast$' "$src/deploy/systemd/ballast-coordinator.service" ||
  fail "ballast-coordinator.service: StateDirectory=ballast (its --store lives there)"
grep -q '^RuntimeDirectory=ballast$' "$src/deploy/systemd/ballast-agent.service" ||
  fail "ballast-agent.service: RuntimeDirectory=ballast (its socket lives there)"
grep -q -- '--store=/var/lib/ballast/' "$src/deploy/config/coordinator.flags" ||
  fail "coordinator.flags: --store is not under the unit's StateDirectory /var/lib/ballast"
grep -q -- '--socket=/run/ballast/' "$src/deploy/config/agent.flags" ||
  fail "agent.flags: --socket is not under the unit's RuntimeDirectory /run/ballast"

verified=0
if command -v systemd-analyze >/dev/null; then
  set +e
  out=$(cd "$dir" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify "${units[@]/#/./}" 2>&1)
  rc=$?
  set -e
  if [ "$rc" = 0 ] && [ -z "$out" ]; then
    verified=1
    echo "systemd-analyze verify: ${units[*]} clean"
  elif grep -q 'ballast-' <<<"$out"; then
    fail "systemd-analyze verify: $out"
  else
    echo "systemd-analyze verify cannot run here ($out); falling back to a parse check"
  fi
fi
if [ "$verified" = 1 ]; then
  for unit in "${units[@]}"; do
    set +e
    out=$(cd "$dir" && systemd-analyze security --offline=true --no-pager "./$unit" 2>&1)
    rc=$?
    set -e
    score=$(grep -Eo 'Overall exposure level for [^:]+: [0-9.]+' <<<"$out" | grep -Eo '[0-9.]+$' || true)
    if [ -z "$score" ]; then
      echo "systemd-analyze security --offline unavailable ($rc); exposure not scored"
      continue
    fi
    awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' ||
      fail "$unit: exposure $score > $MAX_EXPOSURE; systemd-analyze security says:
$(grep '✗' <<<"$out")"
    echo "systemd-analyze security: $unit exposure $score (max $MAX_EXPOSURE)"
  done
else
  "$PYTHON" "$src/tests/deploy/deploy_checks.py" systemd-parse "$dir"/*.service ||
    fail "unit files do not parse (above)"
fi
echo "systemd units test: 1 passed, 0 failed"
