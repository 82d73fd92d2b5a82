#!/usr/bin/python3
"""The job harness (python/ballast_harness/) without a job: its flag parsing, records,
processes (real ones: sh and sleep), CPU quotas on a fake cgroup tree, and a job that
cannot start leaving nothing behind. The jobs themselves run in vit_launch and vit_chaos.
Standard library only; python/ on PYTHONPATH, as ctest sets it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import ballast_harness as harness  # python/ on PYTHONPATH (ctest sets it)
from ballast_harness import contention


class StragglerTest(unittest.TestCase):
    def test_parse_windows(self) -> None:
        s = harness.Straggler.parse("1:3@100-200,300-")
        self.assertEqual((s.rank, s.slowdown, s.windows), (1, 3.0, [(100, 200), (300, None)]))
        self.assertEqual([x for x in (0, 99, 100, 199, 200, 299, 300, 10**6) if s.active(x)],
                         [100, 199, 300, 10**6])
        self.assertEqual(harness.Straggler.parse("0:2").windows, [(0, None)])

    def test_parse_rejects_bad_text(self) -> None:
        for text, why in [("1", "is not RANK:SLOWDOWN"), ("1:0.5", "slowdown 0.5"),
                          ("1:17", "out of range"), ("1:2@x", "is not START-[END]"),
                          ("1:2@20-10", "ends before it starts")]:
            with self.assertRaisesRegex(ValueError, re.escape(why)):
                harness.Straggler.parse(text)

    def test_netns(self) -> None:
        self.assertEqual(harness.parse_netns(["1:nodeb:10.0.0.2"], 2, "cpp"),
                         {1: ("nodeb", "10.0.0.2")})
        for specs, trainer, why in [(["2:a:b"], "cpp", "out of range"),
                                    (["0:a:b", "0:c:d"], "cpp", "given twice"),
                                    (["0:a"], "cpp", "expected RANK:NAMESPACE:ADDRESS"),
                                    (["0:a:b"], "torch", "needs --trainer cpp")]:
            with self.assertRaisesRegex(ValueError, why):
                harness.parse_netns(specs, 2, trainer)


class ContentionTest(unittest.TestCase):
    def test_nice_leaves_the_rank_its_share(self) -> None:
        self.assertEqual(contention.cotenant_nice(2.0), 0)
        self.assertEqual(contention.cotenant_nice(3.0), -3)  # 1.25^3 ~ 2: twice the weight
        self.assertEqual(contention.cotenant_nice(16.0), -12)

    def test_quota_period_is_raised_to_the_kernels_least_quota(self) -> None:
        cfg = harness.JobConfig(build="build", quota_period_us=2000)
        self.assertEqual(contention.quota_period_us(cfg, harness.Straggler(1, 2.0)), 2000)
        self.assertEqual(contention.quota_period_us(cfg, harness.Straggler(1, 4.0)), 4000)


class DeviceContentionTest(unittest.TestCase):
    """--contention device: the straggler's slowdown file follows its windows (the worker
    library reads it every step; missing = full speed)."""

    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.cfg = harness.JobConfig(build="build", contention="device", verbose=False,
                                     stragglers=[harness.Straggler.parse("1:2.5@3-5,8-")])

    def tearDown(self) -> None:
        self.dir.cleanup()

    def factor(self) -> str | None:
        try:
            with open(contention.slowdown_file(self.dir.name, 1)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def test_only_the_straggler_is_told_its_file(self) -> None:
        self.assertEqual(contention.rank_env(self.cfg, self.dir.name, 0), {})
        self.assertEqual(contention.rank_env(self.cfg, self.dir.name, 1),
                         {"BALLAST_EMULATED_SLOWDOWN_FILE":
                          os.path.join(self.dir.name, "rank-1.slowdown")})
        quota = harness.JobConfig(build="build", stragglers=self.cfg.stragglers)
        self.assertEqual(contention.rank_env(quota, self.dir.name, 1), {})

    def test_the_file_is_written_a_step_ahead_on_the_schedule(self) -> None:
        # update(step) comes once rank 0 has begun `step`: the file names the next step,
        # which the worker reads as it begins it (so windows 3-5 and 8- hold from 3 and 8).
        c = harness.Contention(self.cfg, [0, 0], self.dir.name)
        seen = []
        for step in range(11):
            c.update(step)
            seen.append(self.factor())
        self.assertEqual(seen, [None] * 2 + ["2.5@3\n"] * 2 + ["1@5\n"] * 3 + ["2.5@8\n"] * 4)
        self.assertEqual(c.cotenants, {})  # nothing else slows the rank
        self.assertEqual(c.record(), {"kind": "device", "requested": "device",
                                      "mechanism": "emulated slower device (block compute only)",
                                      "stragglers": [{"rank": 1, "slowdown": 2.5}]})
        c.close()
        self.assertIsNone(self.factor())
        self.assertEqual(os.listdir(self.dir.name), [])

    def test_a_schedule_behind_is_applied_from_the_step_now(self) -> None:
        # The first call, or a late poll, inside a window: from the step rank 0 runs.
        c = harness.Contention(self.cfg, [0, 0], self.dir.name)
        c.update(9)
        self.assertEqual(self.factor(), "2.5@9\n")
        c.close()
        self.assertIsNone(self.factor())

    def test_refused_on_the_cuda_backend(self) -> None:
        self.cfg.backend = "cuda"
        with self.assertRaisesRegex(harness.LaunchError, "needs the cpu backend"):
            harness.Contention(self.cfg, [0, 0], self.dir.name)

    def test_no_straggler_records_none(self) -> None:
        cfg = harness.JobConfig(build="build", contention="device", verbose=False)
        self.assertEqual(harness.Contention(cfg, [0, 0], self.dir.name).record()["kind"], "none")


class CgroupQuotaTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.v2 = os.path.join(self.dir.name, "v2")
        self.v1 = os.path.join(self.dir.name, "v1")
        os.makedirs(self.v2)
        os.makedirs(self.v1)

    def tearDown(self) -> None:
        self.dir.cleanup()

    def write(self, *path_and_text: str) -> None:
        *path, text = path_and_text
        with open(os.path.join(*path), "w") as f:
            f.write(text)

    def read(self, *path: str) -> str:
        with open(os.path.join(*path)) as f:
            return f.read()

    def quota(self, period_us: int = 10000) -> harness.CgroupQuota:
        return harness.CgroupQuota("g", period_us, v2_root=self.v2, v1_root=self.v1)

    def test_v2_writes_cpu_max(self) -> None:
        self.write(self.v2, "cgroup.controllers", "cpu memory")
        self.write(self.v2, "cgroup.subtree_control", "cpu memory")
        q = self.quota()
        self.assertTrue(q.available)
        self.assertEqual(q.version, 2)
        self.assertEqual(self.read(self.v2, "g", "cpu.max"), "max 10000")
        q.set_share(0.5)
        self.assertEqual(self.read(self.v2, "g", "cpu.max"), "5000 10000")
        q.set_share(0.01)  # under the kernel's 1 ms least quota
        self.assertEqual(self.read(self.v2, "g", "cpu.max"), "1000 10000")
        q.add(1234)
        self.assertEqual(self.read(self.v2, "g", "cgroup.procs"), "1234")

    def test_v2_without_the_cpu_controller_is_unavailable(self) -> None:
        self.write(self.v2, "cgroup.controllers", "cpu memory")
        self.write(self.v2, "cgroup.subtree_control", "memory")
        self.assertFalse(self.quota().available)

    def test_v1_writes_cfs_quota(self) -> None:
        self.write(self.v1, "cpu.cfs_quota_us", "-1")
        q = self.quota(period_us=4000)
        self.assertEqual(q.version, 1)
        q.set_share(0.25)
        self.assertEqual(self.read(self.v1, "g", "cpu.cfs_period_us"), "4000")
        self.assertEqual(self.read(self.v1, "g", "cpu.cfs_quota_us"), "1000")
        q.set_share(None)
        self.assertEqual(self.read(self.v1, "g", "cpu.cfs_quota_us"), "-1")

    def test_remove_moves_processes_to_the_parent(self) -> None:
        self.write(self.v1, "cpu.cfs_quota_us", "-1")
        q = self.quota()
        q.add(42)
        q.remove()  # a real cgroup's files go with it; these stay, so rmdir fails quietly
        self.assertEqual(self.read(self.v1, "cgroup.procs"), "42")


class RecordsTest(unittest.TestCase):
    def test_median(self) -> None:
        self.assertEqual(harness.median([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(harness.median([4.0, 1.0, 2.0, 3.0]), 2.5)
        self.assertNotEqual(harness.median([]), harness.median([]))  # nan

    def test_load_ranks_splits_steps_from_the_final_record(self) -> None:
        with tempfile.TemporaryDirectory() as out:
            for r in range(2):
                with open(os.path.join(out, f"rank-{r}.jsonl"), "w") as f:
                    for step in range(3):
                        f.write(json.dumps({"step": step, "wall_s": 0.1 * r}) + "\n")
                    f.write(json.dumps({"final": True, "steps": 3}) + "\n")
            ranks = harness.load_ranks(out, 2)
        self.assertEqual([[s["step"] for s in r["steps"]] for r in ranks], [[0, 1, 2]] * 2)
        self.assertEqual(ranks[1]["final"], {"final": True, "steps": 3})
        self.assertIsNone(ranks[0]["contention"])  # a run from before it was recorded

    def test_load_ranks_names_the_contention(self) -> None:
        with tempfile.TemporaryDirectory() as out:
            with open(os.path.join(out, "rank-0.jsonl"), "w") as f:
                f.write(json.dumps({"step": 0, "wall_s": 0.1}) + "\n")
            harness.records.write_contention(out, {"kind": "device", "requested": "device"})
            ranks = harness.load_ranks(out, 1)
        self.assertEqual(ranks[0]["contention"]["kind"], "device")


class ProcessesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.parts = harness.Processes(self.dir.name, threading.Event())

    def tearDown(self) -> None:
        self.parts.close()
        self.dir.cleanup()

    def log(self, name: str) -> str:
        with open(os.path.join(self.dir.name, f"{name}.log")) as f:
            return f.read()

    def test_describe_exit(self) -> None:
        self.assertEqual(harness.describe_exit(3), "exited with 3")
        self.assertEqual(harness.describe_exit(-9), "was killed by SIGKILL")

    def test_parts_log_restart_in_place_and_stop(self) -> None:
        a = self.parts.start("a", ["sh", "-c", "echo started >&2; exec sleep 60"])
        self.parts.start("b", ["sleep", "60"])
        harness.wait_until(lambda: "started" in self.log("a"), 10, "a's log", self.parts.procs)
        restarted = self.parts.kill_and_restart("a")
        self.assertEqual(a.returncode, -9)
        self.assertEqual([n for n, _, _ in self.parts.procs], ["a", "b"])
        self.assertIs(self.parts.procs[0][1], restarted)
        harness.wait_until(lambda: self.log("a").count("started") == 2, 10, "a's second start")
        self.assertNotEqual(os.getsid(restarted.pid), os.getsid(0))  # its own session
        self.parts.close()
        self.assertTrue(all(p.returncode == -15 for _, p, _ in self.parts.procs))

    def test_wait_until_names_a_part_that_exits(self) -> None:
        self.parts.start("doomed", ["sh", "-c", "echo goodbye >&2; exit 3"])
        with self.assertRaisesRegex(harness.LaunchError,
                                    "doomed exited with 3 while waiting for godot:\ngoodbye"):
            harness.wait_until(lambda: False, 10, "godot", self.parts.procs)

    def test_wait_until_times_out_and_stops_on_request(self) -> None:
        began = time.monotonic()
        with self.assertRaisesRegex(harness.LaunchError, "timed out after 0s waiting for x"):
            harness.wait_until(lambda: False, 0.2, "x")
        self.assertLess(time.monotonic() - began, 5)
        stopping = threading.Event()
        stopping.set()
        with self.assertRaises(KeyboardInterrupt):
            harness.wait_until(lambda: False, 10, "x", stopping=stopping)
        with self.assertRaises(KeyboardInterrupt):
            harness.Processes(self.dir.name, stopping).start("late", ["true"])

    def test_stop_process_kills_what_ignores_sigterm(self) -> None:
        # One process (a shell would leave its sleep behind, holding ctest's output open).
        ignores_sigterm = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                           "print('ready', flush=True); time.sleep(60)")
        p = subprocess.Popen([sys.executable, "-c", ignores_sigterm], stdout=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.readline()  # SIGTERM is ignored from here on
        harness.stop_process(p, timeout=0.2)
        p.stdout.close()
        self.assertEqual(p.returncode, -9)


class JobTest(unittest.TestCase):
    def test_a_job_without_binaries_fails_and_leaves_nothing(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            previous = tempfile.tempdir
            tempfile.tempdir = tmp  # the run directory goes here
            try:
                for trainer, why in [("cpp", "ballast-coordinator not found: build first"),
                                     ("torch", None)]:
                    cfg = harness.JobConfig(build=os.path.join(tmp, "nobuild"), trainer=trainer,
                                            verbose=False)
                    with self.assertRaisesRegex(harness.LaunchError, why or "not found"):
                        harness.run_job(cfg)
                    self.assertEqual(os.listdir(tmp), [])
            finally:
                tempfile.tempdir = previous

    def test_batch_is_passed_only_when_given(self) -> None:
        for batch, want in [(None, []), (32, ["--batch=32"])]:
            job = harness.Job(harness.JobConfig(build="build", trainer="gpt", batch=batch,
                                                verbose=False))
            try:
                flags = job.rank_flags(1)
            finally:
                job.close()
            self.assertEqual([f for f in flags if f.startswith("--batch")], want)
            self.assertIn("--rank=1", flags)

    def test_gpt_moe_is_the_gpt_script_with_its_experts_and_job(self) -> None:
        self.assertIn("gpt-moe", harness.TRAINERS)
        self.assertEqual(harness.TORCH_SCRIPT["gpt-moe"], harness.TORCH_SCRIPT["gpt"])
        self.assertEqual(harness.JOB_OF_TRAINER["gpt-moe"], "gpt-moe")
        for trainer, want in [("gpt", []),
                              ("gpt-moe", ["--job=gpt-moe", "--moe_experts=8", "--moe_topk=2"])]:
            job = harness.Job(harness.JobConfig(build="build", trainer=trainer, verbose=False,
                                                trainer_args=["--moe_topk=1"]))
            try:
                flags = job.rank_flags(0)
            finally:
                job.close()
            moe = [f for f in flags if f.startswith(("--moe", "--job"))]
            # The trainer's own flags first; the caller's (argparse: the last wins) after.
            self.assertEqual(moe, want + ["--moe_topk=1"], trainer)
            self.assertEqual(flags[-1], "--moe_topk=1")

    def test_device_contention_is_refused_on_cuda_before_anything_starts(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            previous = tempfile.tempdir
            tempfile.tempdir = tmp
            try:
                cfg = harness.JobConfig(build=os.path.join(tmp, "nobuild"), backend="cuda",
                                        contention="device", verbose=False,
                                        stragglers=[harness.Straggler.parse("1:2")])
                with self.assertRaisesRegex(harness.LaunchError, "needs the cpu backend"):
                    harness.run_job(cfg)
                self.assertEqual(os.listdir(tmp), [])
            finally:
                tempfile.tempdir = previous

    def test_the_torch_trainer_needs_its_extension(self) -> None:
        with tempfile.TemporaryDirectory() as build:
            job = harness.Job(harness.JobConfig(build=build, trainer="gpt", verbose=False))
            try:
                with self.assertRaisesRegex(harness.LaunchError, "ballast_torch_ext"):
                    job.trainer()
            finally:
                job.close()
            self.assertFalse(os.path.exists(job.run_dir))


if __name__ == "__main__":
    unittest.main()
