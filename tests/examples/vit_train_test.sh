#!/usr/bin/env bash
# vit_train as a process: bad flags and missing data get clear errors; a run stopped at a
# checkpoint and resumed is the same run as one that never stopped (bitwise: same losses).
#   vit_train_test.sh PATH_TO_VIT_TRAIN
set -euo pipefail
trainer=$1
work=$(mktemp -d /tmp/ballast-vit-train-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
tiny=(--hidden=24 --heads=6 --layers=1 --mlp_unit_size=8 --eval_images=300 --batch=16
      --progress=none --world=1 --rank=0)

expect_usage_error() {  # WANT_SUBSTRING FLAGS...
  local want=$1 rc=0
  shift
  "$trainer" "$@" >"$work/err" 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "$*: exit code $rc, want 2"
  grep -q -- "$want" "$work/err" || { cat "$work/err" >&2; fail "$*: no '$want'"; }
}
expect_usage_error "--rendezvous is required" --steps=3
expect_usage_error "--world=0" --world=0 --rendezvous="$work/r"
expect_usage_error "--rank=2 out of range" --world=2 --rank=2 --rendezvous="$work/r"
expect_usage_error "--progress=bogus" --rendezvous="$work/r" --progress=bogus
expect_usage_error "--resume needs --checkpoint" --rendezvous="$work/r" --resume
expect_usage_error "heads 5 must divide hidden" --rendezvous="$work/r" --heads=5
expect_usage_error "priority" --rendezvous="$work/r" --priority=loudest
expect_usage_error "--backend=tpu: must be cpu or cuda" --rendezvous="$work/r" --backend=tpu

rc=0
"$trainer" "${tiny[@]}" --rendezvous="$work/r0" --data_dir="$work/nowhere" >"$work/err" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "dataset-fashion-mnist" "$work/err" || fail "missing data: rc $rc"

# Without a usable GPU, --backend=cuda fails at start, naming the backend and why.
if ! nvidia-smi >/dev/null 2>&1 && [ -d /usr/share/datasets/fashion-mnist ]; then
  rc=0
  "$trainer" "${tiny[@]}" --rendezvous="$work/rc" --backend=cuda >"$work/err" 2>&1 || rc=$?
  [ $rc -eq 1 ] && grep -q -- "--backend=cuda: .*\(CUDA\|GPU\|cuda\)" "$work/err" ||
    { cat "$work/err" >&2; fail "--backend=cuda without a GPU: rc $rc"; }
fi

if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  echo "SKIP: Fashion-MNIST not installed (scripts/setup installs it)"
  exit 77
fi

# One straight run of 20 steps, and one stopped at 10 and resumed to 20.
"$trainer" "${tiny[@]}" --rendezvous="$work/r1" --steps=20 --metrics_out="$work/straight.jsonl"
"$trainer" "${tiny[@]}" --rendezvous="$work/r2" --steps=10 --checkpoint="$work/ckpt" \
  --metrics_out="$work/first.jsonl"
[ -s "$work/ckpt" ] || fail "no checkpoint written"
"$trainer" "${tiny[@]}" --rendezvous="$work/r3" --steps=20 --checkpoint="$work/ckpt" --resume \
  --metrics_out="$work/resumed.jsonl" --progress=lines >"$work/resumed.out"
grep -q "resumed at step 10" "$work/resumed.out" || fail "did not resume at step 10"
losses() { grep -o '"step":[0-9]*,.*"loss":[-0-9.e]*' "$1" | sed 's/"time".*"loss"/"loss"/'; }
diff <(losses "$work/straight.jsonl" | tail -10) <(losses "$work/resumed.jsonl") ||
  fail "resumed losses differ from the straight run's"
final() { grep -o '"test_loss":[0-9.]*' "$1"; }
[ "$(final "$work/straight.jsonl")" = "$(final "$work/resumed.jsonl")" ] ||
  fail "final test loss differs: $(final "$work/straight.jsonl") vs $(final "$work/resumed.jsonl")"
echo PASS
