#!/usr/bin/env bash
# The Prometheus artifacts are valid and every alert is tested:
#   promtool check config / check rules / test rules, then a script check that every
#   alert of ballast.rules.yml fires in some promtool test case (so a new alert without a
#   test fails here), has a runbook section in docs/operations.md, and reads only metrics
#   the code exports; and that docs/operations.md's metrics reference lists exactly the
#   metrics the code exports.
#
#   prometheus_rules_test.sh SOURCE_DIR
set -euo pipefail
src=$1
PYTHON=${PYTHON:-/usr/bin/python3}
prom=$src/deploy/prometheus
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v promtool >/dev/null || fail "promtool not found: run scripts/setup (Debian package prometheus)"

promtool check config "$prom/prometheus.yml" || fail "promtool check config $prom/prometheus.yml"
promtool check rules "$prom/ballast.rules.yml" || fail "promtool check rules $prom/ballast.rules.yml"
# promtool resolves rule_files against the working directory: run it beside them.
(cd "$prom" && promtool test rules ballast.rules.test.yml) ||
  fail "promtool test rules $prom/ballast.rules.test.yml"
"$PYTHON" "$src/tests/deploy/deploy_checks.py" rules "$src" ||
  fail "alerts without a firing test case, runbook section or exported metric (above)"
"$PYTHON" "$src/tests/deploy/deploy_checks.py" docs "$src" ||
  fail "docs/operations.md's metrics reference differs from the code (above)"
echo "prometheus rules test: 1 passed, 0 failed"
