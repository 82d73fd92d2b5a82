#!/usr/bin/env bash
# The Kubernetes manifests, validated offline:
#  1. schemas: every object against the Kubernetes OpenAPI schemas (npm kubernetes-models)
#     and the Prometheus Operator CRD schemas (npm @kubernetes-models/prometheus-operator),
#     with unknown fields refused (kubevalidate/validate.mjs). The objects checked are what
#     `kubectl kustomize` renders when kubectl is here, else the kustomization's files;
#     plus deploy/kubernetes/examples/.
#  2. conventions and wiring: labels, hardening, probes, selectors, ports, volumes
#     (deploy_checks.py k8s-policy).
#
#   kubernetes_manifests_test.sh SOURCE_DIR [WORK_DIR]
#
# The npm packages are pinned in kubevalidate/package-lock.json. They are used from
# kubevalidate/node_modules when present (`npm ci --prefix tests/deploy/kubevalidate`),
# else installed once into WORK_DIR (the build directory under ctest).
set -euo pipefail
src=$1
work=${2:-${TMPDIR:-/tmp}/ballast-kubevalidate}
PYTHON=${PYTHON:-/usr/bin/python3}
kdir=$src/deploy/kubernetes
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v node >/dev/null || fail "node not found (Debian package nodejs)"

# --- The validator's packages. ---
modules=$src/tests/deploy/kubevalidate/node_modules
if [ ! -d "$modules/kubernetes-models" ]; then
  mkdir -p "$work"
  if ! cmp -s "$src/tests/deploy/kubevalidate/package-lock.json" "$work/package-lock.json" ||
     [ ! -d "$work/node_modules/kubernetes-models" ]; then
    command -v npm >/dev/null || fail "npm not found (Debian package npm, or nodejs with npm)"
    cp "$src/tests/deploy/kubevalidate/package.json" "$src/tests/deploy/kubevalidate/package-lock.json" "$work/"
    (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1) ||
      fail "npm ci of the schema validator failed: $(tail -n 5 "$work/npm.log")"
  fi
  modules=$work/node_modules
fi

# --- Objects: rendered by kustomize when possible, then the examples. ---
objects=$(mktemp)
trap 'rm -f "$objects"' EXIT
rendered=""
if command -v kubectl >/dev/null && kubectl kustomize "$kdir" >"$objects.rendered" 2>"$objects.err"; then
  rendered="$objects.rendered"
  echo "validating the output of kubectl kustomize $kdir"
elif command -v kubectl >/dev/null; then
  fail "kubectl kustomize $kdir failed: $(cat "$objects.err")"
else
  echo "kubectl not found: validating the kustomization's files as they are"
fi
"$PYTHON" - "$kdir" "$rendered" >"$objects" <<'PY'
import glob, json, os, sys, yaml
kdir, rendered = sys.argv[1], sys.argv[2]
out = []
kust = yaml.safe_load(open(os.path.join(kdir, "kustomization.yaml")))
if kust.get("kind") != "Kustomization" or not kust.get("resources"):
    sys.exit("kustomization.yaml: not a Kustomization with resources")
for res in kust["resources"]:
    if not os.path.exists(os.path.join(kdir, res)):
        sys.exit(f"kustomization.yaml: resource {res} does not exist")
if rendered:
    out += [{"file": "kubectl kustomize", "object": d} for d in yaml.safe_load_all(open(rendered)) if d]
else:
    for res in kust["resources"]:
        out += [{"file": res, "object": d} for d in yaml.safe_load_all(open(os.path.join(kdir, res))) if d]
for path in sorted(glob.glob(os.path.join(kdir, "examples", "*.yaml"))):
    out += [{"file": os.path.relpath(path, kdir), "object": d} for d in yaml.safe_load_all(open(path)) if d]
json.dump(out, sys.stdout)
PY
rm -f "$objects.rendered" "$objects.err"
KUBEVALIDATE_MODULES=$modules node "$src/tests/deploy/kubevalidate/validate.mjs" <"$objects" ||
  fail "Kubernetes manifests do not match their schemas (above)"

"$PYTHON" "$src/tests/deploy/deploy_checks.py" k8s-policy "$src" ||
  fail "Kubernetes manifests break the conventions (above)"
echo "kubernetes manifests test: 1 passed, 0 failed"
