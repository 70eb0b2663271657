"""The hub's sizing harness (scripts/hub_sizing.py, scripts/student_sim.py) and its idle culler.

A made-up class of two students on a hub of its own: one student runs lesson 01 through the
hub and moves its slider, as the sizing table's students do; the other's server, left idle,
must be stopped by the idle culler. Needs root, like tests/test_hub.py (it makes unix users).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import hub_sizing  # noqa: E402

# A student simulated through the hub, and the culler's wait: make test-all runs them, after make test.
pytestmark = pytest.mark.slow

IDLE_SECONDS = 20


@pytest.fixture(scope="module")
def small_class():
    if os.geteuid() != 0:
        pytest.fail("the hub's tests make unix users and run servers as them: run them as root")
    log = ROOT / "test-artifacts" / "hub-sizing-test.log"
    log.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tr-sizing-") as folder:
        os.chmod(folder, 0o755)  # the students must reach their homes inside it
        with hub_sizing.throwaway_class(2, Path(folder) / "state", log, IDLE_SECONDS) as hub:
            yield hub


def test_a_simulated_student_runs_lesson_01_through_the_hub_and_every_move_redraws(small_class):
    url, token, users = small_class
    row = asyncio.run(hub_sizing.one_class(url, token, users[:1], moves=6, pause_s=0.1))
    assert row["students"] == 1
    assert row["n_round_trips"] == 6  # one redraw of the view per move, none lost
    # A server and a kernel that imported torch: far above an empty Python's ~10 MB.
    print(f"one student: {row['memory_mb']:.0f} MB (bound: > 100)")
    assert row["memory_mb"] > 100
    assert 0 < row["p50_ms"] <= row["p95_ms"]


def test_an_idle_server_is_stopped_by_the_culler(small_class):
    url, token, users = small_class
    spawned = asyncio.run(hub_sizing.start_server(url, token, users[1]))
    started = time.perf_counter()
    # The culler looks every IDLE_SECONDS / 2: a server idle since its start goes within about
    # 1.5 x IDLE_SECONDS; 90 s leaves room for a loaded machine.
    while asyncio.run(hub_sizing.api(url, token, "GET", f"users/{users[1]}"))["servers"]:
        assert time.perf_counter() - started < 90, f"{users[1]}'s idle server still runs after 90 s"
        time.sleep(1)
    print(f"server ready after {spawned:.1f} s, stopped as idle {time.perf_counter() - started:.0f} s later "
          f"(timeout {IDLE_SECONDS} s)")
