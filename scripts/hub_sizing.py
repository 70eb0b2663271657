"""How many students one machine's hub holds, measured.

For each N: N students' servers are started through the hub's REST API (each as its own
unix user), every student starts a kernel and runs lesson 01 top to bottom (all N at once,
as a class that starts together), then every student moves lesson 01's first widget 40
times, 150 ms apart, all N at once. Measured per N:
  - memory per student: the proportional set size (PSS: shared pages split between the
    processes sharing them) of everything the student's unix user runs (server + kernel);
  - server start: the hub's spawn, POST .../server until the server is ready;
  - kernel start: POST /api/kernels until the kernel answers kernel_info;
  - the widget's round trip through hub, proxy, server and kernel (scripts/student_sim.py),
    p50 and p95 over every move of every student.

Usage (as root, on a quiet machine): python scripts/hub_sizing.py --students 1 4 8 16
It starts a hub of its own (scripts/hub.py) with a throwaway roster, and removes it after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Iterator

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hub as hubs  # noqa: E402  (scripts/hub.py)
from lab_driver import free_port  # noqa: E402
from student_sim import Student, code_cells  # noqa: E402

MOVES, PAUSE_S = 40, 0.15
# tornado's client sends 10 requests at a time by default and fails the rest after 20 s in its
# queue: a class of 32 polling its servers' start waits longer than that.
AsyncHTTPClient.configure(None, max_clients=1000)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def api(hub: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    response = await AsyncHTTPClient().fetch(HTTPRequest(
        f"{hub}hub/api/{path}", method=method, headers={"Authorization": f"token {token}"},
        body=None if body is None and method in ("GET", "DELETE") else json.dumps(body or {}),
        request_timeout=600), raise_error=False)
    if response.code >= 400:
        raise RuntimeError(f"{method} {path}: HTTP {response.code} {response.body[:200]!r}")
    return json.loads(response.body) if response.body else {}


async def start_server(hub: str, token: str, user: str) -> float:
    """Spawn the user's server; seconds until the hub reports it ready."""
    start = time.perf_counter()
    await api(hub, token, "POST", f"users/{user}/server")
    while not (await api(hub, token, "GET", f"users/{user}"))["servers"].get("", {}).get("ready"):
        await asyncio.sleep(0.1)
    return time.perf_counter() - start


async def stop_server(hub: str, token: str, user: str) -> None:
    """Stop the user's server and wait until it is gone (a new start is refused until then)."""
    await api(hub, token, "DELETE", f"users/{user}/server")
    while (await api(hub, token, "GET", f"users/{user}"))["servers"]:
        await asyncio.sleep(0.2)


async def student_token(hub: str, token: str, user: str) -> str:
    reply = await api(hub, token, "POST", f"users/{user}/tokens",
                      {"expires_in": 3600, "note": "hub sizing"})
    return reply["token"]


def pss_mb(uid: int) -> float:
    """Proportional set size of every process the unix user runs, in MB."""
    total_kb = 0
    for pid in hubs.processes_of(uid):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue  # a process that ended while we read
    return total_kb / 1024


async def one_class(hub: str, token: str, users: list[str], moves: int = MOVES,
                    pause_s: float = PAUSE_S) -> dict[str, float]:
    """Start N servers, run lesson 01 in N kernels, move N widgets: one row of the table."""
    spawns = await asyncio.gather(*(start_server(hub, token, u) for u in users))
    tokens = await asyncio.gather(*(student_token(hub, token, u) for u in users))
    students = [Student(u, f"{hub}user/{u}/", t) for u, t in zip(users, tokens)]
    cells = code_cells()
    await asyncio.gather(*(s.start() for s in students))
    await asyncio.gather(*(s.run_lesson(cells) for s in students))
    await asyncio.gather(*(s.move_slider(moves, pause_s) for s in students))
    memory = [pss_mb(pwd.getpwnam(u).pw_uid) for u in users]  # server + kernel, lesson run
    await asyncio.gather(*(s.stop() for s in students))
    await asyncio.gather(*(stop_server(hub, token, u) for u in users))
    runs = [s.run for s in students]
    trips = [t for r in runs for t in r.round_trips_ms]
    return {"students": len(users), "n_round_trips": len(trips), "server_start_s": statistics.median(spawns),
            "kernel_start_s": statistics.median(r.kernel_start_s for r in runs),
            "kernel_start_max_s": max(r.kernel_start_s for r in runs),
            "lesson_s": statistics.median(r.lesson_s for r in runs),
            "memory_mb": statistics.median(memory),
            "p50_ms": percentile(trips, 50), "p95_ms": percentile(trips, 95)}


async def admin_token(hub: str, admin: str, password: str) -> str:
    """Log in as an instructor (the hub's login form) and ask the hub for an API token."""
    http = AsyncHTTPClient()
    login = await http.fetch(f"{hub}hub/login", raise_error=False)
    cookies = {c.split("=", 1)[0]: c.split(";", 1)[0].split("=", 1)[1]
               for c in login.headers.get_list("Set-Cookie")}
    xsrf = cookies["_xsrf"]
    reply = await http.fetch(HTTPRequest(
        f"{hub}hub/login?next=", method="POST", follow_redirects=False,
        body=f"username={admin}&password={password}&_xsrf={xsrf}",
        headers={"Cookie": f"_xsrf={xsrf}"}), raise_error=False)
    for c in reply.headers.get_list("Set-Cookie"):
        name, value = c.split(";", 1)[0].split("=", 1)
        cookies[name] = value
    if reply.code != 302:
        raise RuntimeError(f"logging in as {admin} failed: HTTP {reply.code}")
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    # The login sets a new session and with it a new _xsrf token: the API call shows that one.
    reply = await http.fetch(HTTPRequest(
        f"{hub}hub/api/users/{admin}/tokens", method="POST", body=json.dumps({"note": "hub sizing"}),
        headers={"Cookie": cookie, "X-XSRFToken": cookies["_xsrf"], "Content-Type": "application/json"}),
        raise_error=False)
    if reply.code != 201:
        raise RuntimeError(f"no API token for {admin}: HTTP {reply.code} {reply.body[:300]!r} {sorted(cookies)}")
    return json.loads(reply.body)["token"]


@contextlib.contextmanager
def throwaway_class(n_students: int, state: Path, log: Path, idle_seconds: int | None = None
                    ) -> Iterator[tuple[str, str, list[str]]]:
    """A class of n made-up students on a hub of its own, on free local ports, in test mode;
    yields (the hub's URL, an instructor's API token, the students' ids). Removed after."""
    users = [f"trsize{i:03d}" for i in range(n_students)]
    roster = state.parent / f"{state.name}-roster.csv"
    roster.write_text("student_id,name\n" + "".join(f"{u},Student {u}\n" for u in users))
    homes = state.parent / f"{state.name}-homes"
    admin, password = "trsizeadmin", secrets.token_hex(20)
    hubs.teardown(state)  # what a killed earlier run left
    hubs.setup(roster, [admin], state, homes, ["01_attention_scores"])
    running = None
    try:
        env = {"TR_HUB_TEST_PASSWORD": secrets.token_hex(8), "TR_HUB_TEST_ADMIN_PASSWORD": password}
        if idle_seconds is not None:
            env["TR_HUB_IDLE_SECONDS"] = str(idle_seconds)
        running = hubs.launch(state, free_port(), free_port(), free_port(), log, env=env)
        url = running.url + "/"
        yield url, asyncio.run(admin_token(url, admin, password)), users
    finally:
        if running is not None:
            hubs.stop(running)
        hubs.teardown(state)  # the users and their homes
        with contextlib.suppress(FileNotFoundError):
            homes.rmdir()
        roster.unlink(missing_ok=True)


def sizing(counts: list[int], state: Path, log: Path) -> list[dict[str, float]]:
    """One row per count, on one throwaway class of max(counts) students."""
    rows = []
    with throwaway_class(max(counts), state, log) as (url, token, users):
        for n in counts:
            rows.append(asyncio.run(one_class(url, token, users[:n])))
            print(table_row(rows[-1]), flush=True)
    return rows


HEADER = (f"{'students':>8s} {'MB each':>8s} {'server start s':>15s} {'kernel start s':>15s} "
          f"{'(max)':>6s} {'lesson 01 s':>12s} {'p50 ms':>7s} {'p95 ms':>7s}")


def table_row(r: dict[str, float]) -> str:
    return (f"{r['students']:8d} {r['memory_mb']:8.0f} {r['server_start_s']:15.1f} {r['kernel_start_s']:15.1f} "
            f"{r['kernel_start_max_s']:6.1f} {r['lesson_s']:12.1f} {r['p50_ms']:7.1f} {r['p95_ms']:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--state", type=Path, default=Path("/srv/transformer-roots-sizing"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("hub_sizing.py makes a unix user per simulated student: run it as root")
    log = Path(__file__).resolve().parent.parent / "test-artifacts" / "hub-sizing.log"
    log.parent.mkdir(exist_ok=True)
    print(f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB; "
          f"each student runs lesson 01, then moves its slider {MOVES} times, {PAUSE_S * 1000:.0f} ms apart")
    print(HEADER, flush=True)
    rows = sizing(sorted(args.students), args.state.resolve(), log)
    (log.parent / "hub-sizing.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
