#!/usr/bin/env bash
# `pip install` of the Python package (python/setup.py drives the project's CMake), into a
# target folder, then a training step from that install alone (no source tree on the
# path), compared with plain PyTorch.
#   pip_install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/ballast-pip-test-XXXXXX)
trap 'rm -rf "$work"' EXIT

BALLAST_BUILD_DIR="$build" /usr/bin/python3 -m pip install --quiet --no-build-isolation \
  --no-deps --target "$work/site" "$src/python" >"$work/pip.log" 2>&1 ||
  { cat "$work/pip.log" >&2; echo "FAIL: pip install" >&2; exit 1; }
ls "$work/site/ballast/torch/"_C*.so >/dev/null || { echo "FAIL: no extension installed" >&2; exit 1; }

cd "$work"  # nothing from the source tree is importable from here
PYTHONPATH="$work/site" /usr/bin/python3 - <<'PY'
import os, tempfile
import torch, torch.distributed as dist
import ballast.torch as bt

assert bt.__file__.startswith(os.getcwd()), bt.__file__
dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/rv", rank=0, world_size=1)
bt.init(job="pip")
mlp = bt.ParallelMLP(8, 32, unit_size=8)
fc1, fc2 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)
sd = mlp.state_dict()
with torch.no_grad():
    fc1.weight.copy_(sd["linear_fc1.weight"]); fc1.bias.copy_(sd["linear_fc1.bias"])
    fc2.weight.copy_(sd["linear_fc2.weight"]); fc2.bias.copy_(sd["linear_fc2.bias"])
x = torch.randn(4, 2, 8)
y, _ = mlp(x)
want = fc2(torch.nn.functional.gelu(fc1(x), approximate="tanh"))
torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
y.sum().backward()
bt.AdamW(mlp.parameters()).step()
print("PASS: installed ballast.torch matches plain PyTorch")
PY
