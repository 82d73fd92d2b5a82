"""Ballast's local job harness: runs a training job under a real coordinator and agent on
this machine, with real contention on chosen ranks, and stops everything it started.

The ViT demo's launcher (examples/vit/launch.py), the chaos run (examples/vit/chaos.py) and
the end-to-end benchmarks (bench/*.py) are built on it:

    from ballast_harness import JobConfig, LaunchError, Straggler, median, run_job

    cfg = JobConfig(build="build", steps=300, mode="auto",
                    stragglers=[Straggler.parse("1:2@100-")])
    ranks = run_job(cfg)  # per rank: {"steps": [...], "final": {...}}; LaunchError on failure
    print(median([r["wall_s"] for r in ranks[0]["steps"]]))

Standard library only. It lives in python/ beside the ``ballast`` package; scripts/demo and
scripts/bench put python/ on PYTHONPATH, and the scripts above add it themselves when run
directly from a checkout.

Modules, one concern each:
  config.py         JobConfig, Straggler (contention schedules), LaunchError, flag parsing
  processes.py      starting parts in their own sessions, stopping them, waiting on them
  cgroups.py        a CPU quota through cgroup v2 or v1
  contention.py     co-tenants, quotas or an emulated slower device on the stragglers'
                    schedules
  control_plane.py  the coordinator, the job's policy and the agent
  job.py            Job (the ranks and the loop that follows them), run_job
  records.py        the trainers' per-step records, the run's contention, median, the
                    demo's summary
"""

from .cgroups import CgroupQuota
from .config import (CONTENTION_KINDS, JOB_OF_TRAINER, MODES, TORCH_SCRIPT, TRAINER_FLAGS,
                     TRAINERS, JobConfig, LaunchError, Straggler, log, parse_netns)
from .contention import SLOWDOWN_FILE_ENV, Contention
from .control_plane import ControlPlane
from .job import Job, run_job
from .processes import (Processes, binary, describe_exit, free_port, stop_process, tail,
                        wait_until)
from .records import RankRecords, load_contention, load_ranks, median, summarize

__all__ = [
    "CONTENTION_KINDS", "CgroupQuota", "Contention", "ControlPlane", "JOB_OF_TRAINER", "Job",
    "JobConfig", "LaunchError", "MODES", "Processes", "RankRecords", "SLOWDOWN_FILE_ENV",
    "Straggler", "TORCH_SCRIPT", "TRAINER_FLAGS", "TRAINERS", "binary", "describe_exit",
    "free_port", "load_contention", "load_ranks", "log", "median", "parse_netns", "run_job",
    "stop_process", "summarize", "tail", "wait_until",
]
