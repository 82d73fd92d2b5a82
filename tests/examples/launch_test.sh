#!/usr/bin/env bash
# The demo's launcher as a process: a full run with contention coming and going, Ctrl-C
# mid-run, a worker that dies, and bad flags. After each, nothing it started may be left:
# no process, no run directory, no cgroup, no socket.
#   launch_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
launch="$src/examples/vit/launch.py"
work=$(mktemp -d /tmp/ballast-launch-test-XXXXXX)
export TMPDIR="$work/tmp"  # the launcher's run directories go here
mkdir -p "$TMPDIR"
cleanup() {
  pkill -9 -f -- "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
tiny=(--hidden=24 --heads=6 --layers=1 --mlp_unit_size=8 --eval_images=200 --log_every=10)

expect_nothing_left() {
  local what=$1 launcher_pid=$2
  sleep 0.5
  if pgrep -f -- "$TMPDIR" >/dev/null; then
    pgrep -af -- "$TMPDIR" >&2
    fail "$what: processes left running"
  fi
  if pgrep -f -- "$build/examples/cotenant" >/dev/null; then fail "$what: a co-tenant is left"; fi
  if [ -n "$(ls -A "$TMPDIR")" ]; then ls -la "$TMPDIR" >&2; fail "$what: run directory left"; fi
  for root in /sys/fs/cgroup /sys/fs/cgroup/cpu; do
    if compgen -G "$root/ballast-$launcher_pid-*" >/dev/null; then fail "$what: cgroup left"; fi
  done
  echo "ok: $what left nothing behind"
}

wait_for_steps() {  # FILE N: until FILE has N step records (at most 60 s)
  for _ in $(seq 600); do
    if [ -f "$1" ] && [ "$(grep -c '"step"' "$1" || true)" -ge "$2" ]; then return 0; fi
    sleep 0.1
  done
  fail "no progress in $1"
}

# 1. A whole run; contention comes at step 10 and goes at step 25.
/usr/bin/python3 "$launch" --build "$build" --steps 40 --batch 16 --straggler 1:2@10-25 \
  --out "$work/full" --progress lines -- "${tiny[@]}" >"$work/full.out" 2>&1 &
pid=$!
wait $pid || { cat "$work/full.out" >&2; fail "full run exited with $?"; }
for want in "contention ON" "contention OFF" "Test accuracy" "finished 40 steps"; do
  grep -q "$want" "$work/full.out" || { cat "$work/full.out" >&2; fail "full run: no '$want'"; }
done
[ "$(grep -c '"step"' "$work/full/rank-1.jsonl")" -eq 40 ] || fail "rank 1 did not log 40 steps"
expect_nothing_left "a full run" $pid

# 2. Ctrl-C mid-run: workers stop together, exit code 130.
/usr/bin/python3 "$launch" --build "$build" --steps 100000 --batch 16 --straggler 1:2 \
  --out "$work/int" --progress none -- "${tiny[@]}" >"$work/int.out" 2>&1 &
pid=$!
wait_for_steps "$work/int/rank-0.jsonl" 5
kill -INT $pid
rc=0
timeout 60 tail --pid=$pid -f /dev/null || fail "launcher still running 60 s after SIGINT"
wait $pid || rc=$?
[ $rc -eq 130 ] || { cat "$work/int.out" >&2; fail "SIGINT: exit code $rc, want 130"; }
grep -q '"interrupted":true' "$work/int/rank-0.jsonl" || fail "rank 0 did not stop cleanly"
grep -q '"interrupted":true' "$work/int/rank-1.jsonl" || fail "rank 1 did not stop cleanly"
expect_nothing_left "Ctrl-C" $pid

# 3. A worker dies: the launcher names it, stops everything and fails.
/usr/bin/python3 "$launch" --build "$build" --steps 100000 --batch 16 \
  --out "$work/die" --progress none -- "${tiny[@]}" >"$work/die.out" 2>&1 &
pid=$!
wait_for_steps "$work/die/rank-0.jsonl" 5
pkill -9 -f -- "--rank=1 .*--rendezvous=$TMPDIR" || fail "rank 1 not found"
rc=0
timeout 90 tail --pid=$pid -f /dev/null || fail "launcher still running 90 s after a worker died"
wait $pid || rc=$?
[ $rc -eq 1 ] || { cat "$work/die.out" >&2; fail "dead worker: exit code $rc, want 1"; }
grep -q "rank-1 was killed by SIGKILL" "$work/die.out" || { cat "$work/die.out" >&2; fail "rank-1 not named"; }
expect_nothing_left "a dead worker" $pid

# 4. The launcher itself is killed (-9): its parts get SIGTERM from the kernel
# (PR_SET_PDEATHSIG) and stop; only the run directory and cgroups can be left.
/usr/bin/python3 "$launch" --build "$build" --steps 100000 --batch 16 --straggler 1:2 \
  --out "$work/kill" --progress none -- "${tiny[@]}" >"$work/kill.out" 2>&1 &
pid=$!
wait_for_steps "$work/kill/rank-0.jsonl" 5
kill -9 $pid
wait $pid 2>/dev/null || true
for _ in $(seq 300); do
  pgrep -f -- "$TMPDIR" >/dev/null || pgrep -f -- "$build/examples/cotenant" >/dev/null || break
  sleep 0.1
done
if pgrep -f -- "$TMPDIR" >/dev/null || pgrep -f -- "$build/examples/cotenant" >/dev/null; then
  pgrep -af -- "$TMPDIR" >&2 || true
  fail "parts of a killed launcher are still running after 30 s"
fi
for root in /sys/fs/cgroup /sys/fs/cgroup/cpu; do
  for g in "$root"/ballast-$pid-*; do [ -d "$g" ] && rmdir "$g"; done
done
rm -rf "${TMPDIR:?}"/*
echo "ok: a killed launcher's parts stopped"

# 5. Bad flags: exit code 2 and a message naming the flag; nothing started.
rc=0
/usr/bin/python3 "$launch" --build "$build" --straggler 5:2 >"$work/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "straggler rank 5" "$work/bad.out" || fail "bad rank: rc $rc"
rc=0
/usr/bin/python3 "$launch" --build "$build" --straggler 1:0.5 >"$work/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "slowdown 0.5" "$work/bad.out" || fail "bad slowdown: rc $rc"
rc=0
/usr/bin/python3 "$launch" --build "$build" --quota-period-us 999 >"$work/bad.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "quota-period-us 999 out of range" "$work/bad.out" ||
  fail "bad quota period: rc $rc"
rc=0
/usr/bin/python3 "$launch" --build "$build" --backend cuda --trainer torch >"$work/bad.out" 2>&1 ||
  rc=$?
[ $rc -eq 2 ] && grep -q "backend cuda needs --trainer cpp" "$work/bad.out" ||
  fail "cuda with torch: rc $rc"
echo "PASS"
