#!/usr/bin/env python3
"""Checks the layering of the tree: no include goes back up between folders, the bottom
libraries' link lines carry nothing heavy, and the worker library's carries no control
plane (gRPC, protobuf, SQLite: only worker_lib/client/ speaks to the agent).

The layers, bottom up (docs/architecture.md draws them):

  common/          clock, logging, text: Abseil only
  plan/            ids, plans, validation, initial ownership, step timings
  proto/           wire messages and their conversion to plan types
  worker_lib/      blocks and backends (worker_lib/client/ alone speaks gRPC to the agent)
  coordinator/planner/   pure decisions on plan and policy types
  agent/, coordinator/   the control plane's daemons
  ctl/, python/, examples/, bench/, tests/, fuzz/   on top

Usage: layering_test.py SOURCE_DIR BUILD_DIR
"""
import os
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)

# Libraries that must not reach the bottom layers' link lines.
HEAVY = {
    "gRPC": re.compile(r"grpc", re.IGNORECASE),
    "protobuf": re.compile(r"protobuf"),
    "SQLite": re.compile(r"sqlite", re.IGNORECASE),
    "Gloo": re.compile(r"gloo"),
    "OpenBLAS": re.compile(r"openblas", re.IGNORECASE),
    "NCCL/CUDA": re.compile(r"nccl|cudart|cublas"),
    "the worker library": re.compile(r"libballast_worker"),
}


def public_headers(root: Path, folder: str) -> set:
    """The "ballast/x.h" names a folder's include/ballast/ holds."""
    return {f"ballast/{p.name}" for p in (root / folder / "include/ballast").glob("*.h")}


def forbidden_for(path: str, worker_headers: set) -> list:
    """(prefix-or-name, why) pairs that `path` (relative) must not include."""
    up_from_common = ["plan/", "proto/", "worker_lib/", "agent/", "coordinator/", "ctl/"]
    control_plane = ["agent/", "coordinator/", "ctl/"]
    if path.startswith("common/"):
        return [(p, "common/ is the bottom layer") for p in up_from_common] + [
            (h, "common/ is the bottom layer") for h in worker_headers]
    if path.startswith("plan/"):
        return [(p, "the plan library sits below it") for p in up_from_common] + [
            (h, "the plan library sits below the worker library") for h in worker_headers] + [
            ("ballast/v1/", "the plan library speaks no wire format")]
    if path.startswith("proto/"):
        return [(p, "proto/ sits below it") for p in ["worker_lib/"] + control_plane] + [
            (h, "proto/ speaks plan types, not the worker library's") for h in worker_headers]
    if path.startswith("worker_lib/client/"):
        return [(p, "the worker library sits below the control plane") for p in control_plane]
    if path.startswith("worker_lib/"):
        return [(p, "the blocks and backends speak no wire format and no control plane")
                for p in ["proto/", "ballast/v1/"] + control_plane]
    if path.startswith("coordinator/planner/"):
        rules = [(p, "the planner is pure: plan and policy types only")
                 for p in ["proto/", "worker_lib/", "agent/", "ctl/", "ballast/v1/"]]
        rules += [(h, "the planner is pure: plan and policy types only") for h in worker_headers]
        return rules
    if path.startswith("coordinator/") or path.startswith("agent/"):
        other = "agent/" if path.startswith("coordinator/") else "coordinator/"
        return [(other, "the agent and the coordinator talk over the wire only"),
                ("worker_lib/", "the control plane does not link the worker library"),
                ("ctl/", "ballastctl sits above the daemons")] + [
            (h, "the control plane does not link the worker library") for h in worker_headers]
    return []


def planner_allowed(include: str) -> bool:
    """coordinator/planner/ may include itself and coordinator/policy.h, nothing else above."""
    if not include.startswith("coordinator/"):
        return True
    return include.startswith("coordinator/planner/") or include == "coordinator/policy.h"


def check_includes(root: Path) -> list:
    worker_headers = public_headers(root, "worker_lib")
    errors = []
    for folder in ["common", "plan", "proto", "worker_lib", "agent", "coordinator"]:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu") or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            rules = forbidden_for(rel, worker_headers)
            for include in INCLUDE.findall(path.read_text(errors="replace")):
                for prefix, why in rules:
                    if include == prefix or (prefix.endswith("/") and include.startswith(prefix)):
                        errors.append(f'{rel} includes "{include}": {why}')
                if rel.startswith("coordinator/planner/") and not planner_allowed(include):
                    errors.append(f'{rel} includes "{include}": the planner is pure: plan '
                                  "and policy types only")
    return errors


def link_line(build: Path, target_output: str) -> str:
    """The LINK_LIBRARIES of the ninja edge that builds `target_output`."""
    text = (build / "build.ninja").read_text()
    match = re.search(r"^build " + re.escape(target_output) + r"[ :].*\n((?:  .*\n)+)", text,
                      re.MULTILINE)
    if match is None:
        raise SystemExit(f"no build edge for {target_output} in {build}/build.ninja: "
                         "is the build configured with the tests?")
    for line in match.group(1).splitlines():
        line = line.strip()
        if line.startswith("LINK_LIBRARIES = "):
            return line[len("LINK_LIBRARIES = "):]
    return ""


def check_links(build: Path) -> list:
    errors = []
    control_plane = ["gRPC", "protobuf", "SQLite"]
    for output, what, forbidden in [
            ("tests/plan_test", "the plan library", list(HEAVY)),
            ("tests/planner_link_probe", "the planner", list(HEAVY)),
            # Links the worker library and the test helpers only (tests/CMakeLists.txt).
            ("tests/cpu_compute_test", "the worker library", control_plane)]:
        libraries = link_line(build, output)
        if "libballast_plan.a" not in libraries:
            errors.append(f"{output} does not link libballast_plan.a: is the check stale?")
        for name in forbidden:
            if HEAVY[name].search(libraries):
                errors.append(f"{what}'s link line ({output}) carries {name}: {libraries}")
    return errors


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, build = Path(sys.argv[1]), Path(sys.argv[2])
    errors = check_includes(root) + check_links(build)
    for error in errors:
        print(error)
    if not errors:
        print("layering ok: no include goes up, the plan library and the planner link light")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
