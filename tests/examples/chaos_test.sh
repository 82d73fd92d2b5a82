#!/usr/bin/env bash
# The chaos harness, short: the ViT job (200 steps, rank 1 slowed 2x on and off) while the
# coordinator and the agent are SIGKILLed and restarted every 3-4 s. chaos.py checks the
# per-step logs (no step lost or repeated, one plan on all ranks at every step), the policy
# after every restart and how fast plans resume; here we also insist that the kills and
# plans it checked really happened. The 30-minute run is `scripts/bench chaos`.
# Rank 1 is slowed by a co-tenant alone (no CPU quota): this test is about restarts, and
# it needs the straggler seen within its 3-4 s kill intervals. A 2x quota straggler's
# throttling falls mostly outside its short block compute (docs/architecture.md, "Not done
# yet"), and in 1 of 12 runs here it made a single plan in 150 steps (0 of 8 co-tenant
# runs made fewer than 4).
# 200 steps (about 20 s here): the kills come on a wall-clock schedule, each after a restart
# and 3-4 s, and at 150 steps (16 s at 0.1 s a step) the third kill, the second of the
# coordinator, fell at the last steps: one run here ended with 2 kills.
#   chaos_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/ballast-chaos-test-XXXXXX)
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
trap 'pkill -9 -f -- "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

rc=0
/usr/bin/python3 "$src/examples/vit/chaos.py" --build "$build" --steps 200 --batch 32 \
  --interval 3-4 --contention 40-40 --mechanism cotenant --out "$work/out" \
  >"$work/chaos.out" 2>&1 || rc=$?
cat "$work/chaos.out"
if [ $rc -ne 0 ]; then
  # Every coordinator's sessions and plans, across the restarts (about 70 lines): what a
  # failed resume check needs to be read, and gone with $work at exit.
  echo "== coordinator.log"
  cat "$work/out/coordinator.log" 2>/dev/null || true
  fail "chaos.py exited with $rc"
fi
result=$(grep '^{"bench": "chaos"' "$work/chaos.out") || fail "no result line"
/usr/bin/python3 - "$result" <<'PY' || fail "the run did not exercise what it checks"
import json, sys
r = json.loads(sys.argv[1])
assert r["ok"] and r["steps"] == 200, r
assert r["kills_coordinator"] >= 2 and r["kills_agent"] >= 1, "too few kills"
assert r["plan_changes"] >= 2, "no plans: contention never made a straggler"
assert r["resume_seconds"], "no restart was followed by a plan"
PY
echo "ok: chaos"
