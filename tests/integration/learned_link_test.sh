#!/usr/bin/env bash
# The link speed learned on a real shaped link, and a chronic straggler's units resharded
# (issue 14): two emulated nodes (network namespaces joined by a veth pair shaped to 200
# Mbit/s with htb, made and removed here), rank 0 on one and rank 1 on the other, so
# every Gloo byte between them crosses the shaped link. bench/learned_link.py runs the ViT
# with rank 1 slowed 2x and checks that the coordinator learned the link within 20% of
# 25 MB/s, resharded, and stopped offloading. Skips (exit 77) where namespaces cannot be
# made (not root, no iproute2, no htb).
#   learned_link_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: learned_link_test.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/integration/shaped_link.sh
source "$here/shaped_link.sh"
prefix="ballast-ll$$"
dir=$(mktemp -d)
trap 'shaped_link_down "$prefix"; rm -rf "$dir"' EXIT
if ! shaped_link_up "$prefix" 200 2>"$dir/link.err"; then
  echo "SKIP: cannot make the emulated nodes: $(cat "$dir/link.err")"
  exit 77
fi
# Under ASan/UBSan (CI's second run of the suite) the ranks run 2-3x slower and their
# samples spread slower: 7 runs on the capped link read -2.4% to -15.2% (its one reading
# of 31.5 MB/s, before the cap, was most likely the head start shaped_link.sh now caps;
# docs/benchmarks.md, 2026-12-07 (f)). The 20% accuracy is the plain build's to check;
# the sanitized run still checks that the link is learned, and everything else.
tolerance=0.20
if grep -q '^BALLAST_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then tolerance=0.50; fi
# The launcher stops every rank before it returns, so the namespaces are empty by the
# time the trap removes them.
/usr/bin/python3 "$here/../../bench/learned_link.py" --build "$build" --check \
  --link_tolerance "$tolerance" \
  --netns "${prefix}a" "${prefix}b" --addresses "$SHAPED_LINK_ADDR_A" "$SHAPED_LINK_ADDR_B" \
  --rate_mbit 200 --out "$dir/run" || {
  status=$?
  for f in "$dir"/run/*.log; do echo "== $f"; tail -n 20 "$f"; done
  exit "$status"
}
