"""grading/cgroup.py: limits hold for a group's processes in total, are reported, and go away.

Each test attacks a limit the way a submission or a student's server would: several processes
that each stay under a per-process limit, a fork bomb that catches its own error, a busy loop.
"""

import subprocess
import sys
import time
import uuid

import pytest

from grading.cgroup import Group, Limits, available

pytestmark = pytest.mark.skipif(available() is None, reason="needs root and cgroup v1 or v2")
MiB = 2**20


@pytest.fixture
def group_name():
    name = f"transformer-roots-test/{uuid.uuid4().hex[:8]}"
    yield name
    Group.find(name).remove()


def run_in(group: Group, code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], preexec_fn=group.enter, capture_output=True,
                          text=True, timeout=timeout)


def test_memory_is_limited_for_the_group_in_total(group_name):
    """Three processes of 120 MiB each: each alone fits in 300 MiB, the three together do not."""
    group = Group.make(group_name, Limits(memory=300 * MiB, processes=64))
    hog = ("import multiprocessing as mp, time\n"
           "def hold(_):\n"
           "    block = bytearray(120 * 2**20)\n"
           "    for i in range(0, len(block), 4096): block[i] = 1\n"
           "    time.sleep(3)\n"
           "ps = [mp.Process(target=hold, args=(i,)) for i in range(3)]\n"
           "[p.start() for p in ps]; [p.join() for p in ps]\n"
           "print(sorted(p.exitcode for p in ps))\n")
    codes = eval(run_in(group, hog).stdout.strip())
    assert -9 in codes, f"all three ran to the end (exit codes {codes}): the limit is per process"
    assert "memory" in group.limits_hit()
    assert group.memory_peak() <= 300 * MiB


def test_process_limit_is_reported_even_when_the_error_is_caught(group_name):
    group = Group.make(group_name, Limits(memory=1024 * MiB, processes=20))
    bomb = ("import threading, time\n"
            "n = 0\n"
            "try:\n"
            "    for _ in range(100):\n"
            "        threading.Thread(target=time.sleep, args=(2,), daemon=True).start(); n += 1\n"
            "except RuntimeError:\n"
            "    pass\n"
            "print(n)\n")
    started = int(run_in(group, bomb).stdout)
    assert started < 20, f"{started} threads started under a limit of 20 tasks"
    assert group.limits_hit() == ["processes"]


def test_untouched_group_reports_no_limit_and_is_removed(group_name):
    group = Group.make(group_name, Limits(memory=256 * MiB, processes=16, cpu_weight=50))
    assert run_in(group, "print(1)").stdout == "1\n"
    assert group.limits_hit() == []
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=group.enter)
    time.sleep(0.2)
    assert group.pids() == [sleeper.pid]
    group.remove()
    assert sleeper.wait(timeout=5) == -9
    assert not any(folder.exists() for folder in group.folders.values())
