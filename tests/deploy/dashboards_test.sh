#!/usr/bin/env bash
# The Grafana dashboards, statically: valid JSON, the pinned stable uids (unique), a
# Prometheus `datasource` variable used by every panel and variable, queries on every
# panel, and every metric a query reads exported by the code (coordinator/metrics.cc,
# agent/metrics.cc). prometheus_dashboards_test.sh then runs the queries for real.
#
#   dashboards_test.sh SOURCE_DIR
set -euo pipefail
src=$1
PYTHON=${PYTHON:-/usr/bin/python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
"$PYTHON" -c 'import yaml' 2>/dev/null || fail "$PYTHON lacks yaml: run scripts/setup (python3-yaml)"
"$PYTHON" "$src/tests/deploy/deploy_checks.py" dashboards "$src" ||
  fail "dashboards break the rules above"
echo "dashboards test: 1 passed, 0 failed"
