#!/usr/bin/python3
"""Runs the ViT job under Ballast on this machine, with real contention.

Starts a coordinator, an agent and one vit_train process per rank on loopback, pins rank
r to CPU core r, and slows the chosen ranks down with the machine itself: a co-tenant
process (examples/vit/cotenant.cc) competes for the rank's core, and where cgroups are
writable the rank is also held to a CPU quota of 1/slowdown of its core (detected;
otherwise the co-tenant's nice value sets the share). Or, with --contention device, as a
slower device would: only the rank's block compute takes SLOWDOWN times as long (redundant
work inside the blocks' compute timers; CPU backend), its collectives untouched.
Contention follows a schedule in training steps: from the start, from a step on, or on
and off.

Everything it starts is stopped at the end, when any part fails, and on Ctrl-C / SIGTERM
(workers first, so they stop at the same step and write their checkpoint), and the run
directory, cgroups and sockets are removed.

  launch.py --build build --mode auto --straggler 1:2            # the demo
  launch.py --build build --mode off --straggler 1:2@100-300 --out /tmp/run-b
  launch.py --build build --trainer torch --straggler 1:2@100-   # the PyTorch trainer
  launch.py --build build --trainer gpt-moe --straggler 1:2@100-  # GPT, 8 experts top-2
  launch.py --build build --straggler 1:2@50- --contention device  # a slower device
  launch.py --build build --netns 0:nodea:10.213.0.1 --netns 1:nodeb:10.213.0.2 ...
                                            # ranks on emulated nodes (namespaces made before)

This file is the command line only; the harness is the ballast_harness package
(python/ballast_harness/), which the benchmarks use too.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

try:
    import ballast_harness as harness
except ModuleNotFoundError:  # run straight from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import ballast_harness as harness


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="CMake build directory with the binaries")
    p.add_argument("--world", type=int, default=2, help="TP ranks (processes)")
    p.add_argument("--steps", type=int, default=700)
    p.add_argument("--batch", type=int, default=None,
                   help="per step (default: the trainer's own: the ViTs 64 images, the GPT 16 "
                        "sequences as 2 micro-batches of 8)")
    p.add_argument("--mode", choices=harness.MODES, default="auto",
                   help="Ballast's balancing mode")
    p.add_argument("--trainer", choices=harness.TRAINERS, default="cpp",
                   help="cpp: examples/vit/vit_train; torch: examples/torch/vit_train.py; "
                        "gpt: examples/torch/gpt_train.py; gpt-moe: the same GPT with "
                        "mixture-of-experts MLPs (--moe_experts=8 --moe_topk=2)")
    p.add_argument("--straggler", action="append", default=[],
                   metavar="RANK:SLOWDOWN[@START-END,...]",
                   help="slow RANK down SLOWDOWN times during the step windows "
                        "(default: whole run)")
    p.add_argument("--contention", choices=harness.CONTENTION_KINDS, default="auto",
                   help="how a straggler is slowed: quota (a co-tenant process and a CPU "
                        "quota), cotenant (a co-tenant alone), auto (quota where cgroups are "
                        "writable, else cotenant): its whole core, collectives included; "
                        "device: an emulated slower device, its block compute only")
    p.add_argument("--quota-period-us", type=int, default=harness.JobConfig.quota_period_us,
                   help="the CPU quota's period (1000-1000000; shorter shows the slowdown in "
                        "shorter compute, see JobConfig; raised where 1/SLOWDOWN of it would "
                        "be under the kernel's 1 ms least quota)")
    p.add_argument("--out", default="", help="keep per-rank metrics (JSONL) and logs here")
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--agent-metrics-port", type=int, default=0)
    p.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE",
                   help="extra policy settings (see ballastctl policy set)")
    p.add_argument("--coordinator-flag", action="append", default=[], metavar="--FLAG=VALUE",
                   help="extra ballast-coordinator flag, e.g. "
                        "--coordinator-flag=--fixed_costs=off")
    p.add_argument("--progress", default="auto", choices=("auto", "bar", "lines", "none"))
    p.add_argument("--netns", action="append", default=[], metavar="RANK:NAMESPACE:ADDRESS",
                   help="run RANK in an existing network namespace, its Gloo transport on "
                        "ADDRESS (C++ trainer only)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: one process per GPU, rank r on the GPU of LOCAL_RANK=r (C++ "
                        "trainer only; --straggler throttles CPU time, not a GPU, and "
                        "--contention device is refused)")
    p.add_argument("trainer_args", nargs="*", help="extra vit_train flags (after --)")
    return p.parse_args(argv)


def job_config(a: argparse.Namespace) -> harness.JobConfig:
    """The flags checked and turned into a JobConfig; ValueError names a bad flag."""
    stragglers = [harness.Straggler.parse(s) for s in a.straggler]
    for s in stragglers:
        if not 0 <= s.rank < a.world:
            raise ValueError(f"--straggler rank {s.rank} out of range [0, {a.world})")
    policy = dict(kv.split("=", 1) for kv in a.policy if "=" in kv)
    if len(policy) != len(a.policy):
        raise ValueError("--policy takes KEY=VALUE")
    for flag in a.coordinator_flag:
        if not flag.startswith("--"):
            raise ValueError(f"--coordinator-flag {flag!r} must start with --")
    if a.world < 1 or a.steps < 1:
        raise ValueError("--world and --steps must be >= 1")
    if a.batch is not None and a.batch < 1:
        raise ValueError("--batch must be >= 1")
    if not 1000 <= a.quota_period_us <= 1000000:  # the kernel's cfs_period_us range
        raise ValueError(f"--quota-period-us {a.quota_period_us} out of range [1000, 1000000]")
    netns = harness.parse_netns(a.netns, a.world, a.trainer)
    if a.backend == "cuda" and a.trainer != "cpp":
        raise ValueError("--backend cuda needs --trainer cpp")
    if a.backend == "cuda" and a.contention == "device":
        raise ValueError("--contention device needs --backend cpu: it burns host time, which "
                         "does not slow a GPU")
    return harness.JobConfig(build=a.build, world=a.world, steps=a.steps, batch=a.batch,
                             mode=a.mode, stragglers=stragglers, contention=a.contention,
                             quota_period_us=a.quota_period_us, out=a.out,
                             metrics_port=a.metrics_port,
                             agent_metrics_port=a.agent_metrics_port,
                             trainer_args=a.trainer_args, policy=policy, progress=a.progress,
                             trainer=a.trainer, netns=netns, backend=a.backend,
                             coordinator_flags=a.coordinator_flag)


def main(argv: Optional[list[str]] = None) -> int:
    a = parse_args(argv)
    try:
        cfg = job_config(a)
    except ValueError as e:
        print(f"launch.py: {e}", file=sys.stderr)
        return 2
    try:
        ranks = harness.run_job(cfg)
    except harness.LaunchError as e:
        print(f"launch.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("launch.py: interrupted; everything it started has been stopped", file=sys.stderr)
        return 130
    harness.summarize(cfg, ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
