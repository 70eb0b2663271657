"""Drive JupyterLab in headless Chromium: used by the browser test and by the benchmark.

`jupyterlab(root)` starts a server on a free local port with a random token and always
stops it: a learner's JupyterLab, configured as `make lab` configures it (learner-lab/), or the
instructor's; `open_lesson(page, url)` opens a notebook and waits for its kernel;
`run_lesson(page, ...)` opens a notebook, runs every cell, then presses ArrowRight on the
first slider of a live widget (turning back at its ends) and times each press until the
widget's view changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
IDLE = "Python 3 (ipykernel) | Idle"
# The learner's JupyterLab configuration, which `make lab` puts first on JUPYTER_CONFIG_PATH.
LEARNER_CONFIG = Path(__file__).resolve().parent.parent / "learner-lab"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, log_path: Path, cwd: Path | None = None,
               instructor: bool = False) -> Iterator[str]:
    """Start `jupyter lab` on `root`, yield its base URL (with token), then stop it.

    The learner's JupyterLab of `make lab`, from a fresh settings folder: learner-lab/ first on
    the Jupyter configuration path. `instructor=True`: the instructor's (`make instructor-lab`:
    the formgrader and Create Assignment). `cwd`: the folder the server runs in (nbgrader's
    formgrader reads nbgrader_config.py there)."""
    port, token = free_port(), secrets.token_hex(16)
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(Path(home, "settings")),
                   JUPYTERLAB_WORKSPACES_DIR=str(Path(home, "workspaces")),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                        f"{os.environ.get('PATH', '')}")
        if instructor:
            # The instructor's JupyterLab keeps the "news?" pop-up, which would cover the page:
            # answer it up front.
            news = Path(home, "settings", "@jupyterlab", "apputils-extension",
                        "notification.jupyterlab-settings")
            news.parent.mkdir(parents=True)
            news.write_text(json.dumps({"fetchNews": "false"}))
        else:
            env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
                filter(None, [str(LEARNER_CONFIG), os.environ.get("JUPYTER_CONFIG_PATH")]))
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
                   "--ip=127.0.0.1", f"--port={port}", f"--ServerApp.token={token}",
                   "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        log_path.parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no test-artifacts/ yet
        with open(log_path, "w") as log:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                      env=env, cwd=cwd, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.time() + 60
            while True:
                if server.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited with code "
                                       f"{server.returncode}; see {log_path}")
                try:
                    urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                    break
                except OSError:
                    if time.time() > deadline:
                        raise RuntimeError(f"jupyter lab did not answer on port {port} "
                                           f"within 60 s; see {log_path}")
                    time.sleep(0.3)
            # "reset": each page starts from an empty workspace, not the last page's tabs
            yield f"{base}/lab/tree/{{path}}?token={token}&reset"
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def launch_options() -> dict:
    """Debian's Chromium when installed (as in CI), otherwise Playwright's own browser."""
    if Path(CHROMIUM).exists():
        return {"executable_path": CHROMIUM, "args": CHROMIUM_FLAGS}
    if shutil.which("chromium"):
        return {"executable_path": shutil.which("chromium"), "args": CHROMIUM_FLAGS}
    return {"args": CHROMIUM_FLAGS}


def browser_missing_message() -> str:
    return ("No Chromium for the browser test. On Debian as root: "
            "`apt-get install -y chromium` "
            "(make test does this); elsewhere: `python -m playwright install chromium`.")


def open_lesson(page, url: str) -> None:
    """Open a notebook and wait until its kernel is idle (nothing has run yet)."""
    page.goto(url)
    # Wait for the kernel, not the page: a Run All clicked before it exists is dropped.
    page.locator("#jp-main-statusbar").get_by_text(IDLE).wait_for(timeout=90_000)


def run_lesson(page, url: str, presses: int = 20, screenshot: Path | None = None,
               pause_ms: int = 150, navigate: bool = True) -> list[float]:
    """Open a notebook, run all cells, move the first live widget's slider key by key (or
    click its first checkbox); return the ms from each press to the widget's redraw.

    Presses come `pause_ms` apart, a brisk human pace; pressed back to back (pause_ms=0)
    about half of them wait roughly 30 ms more in the server and kernel before the reply.
    navigate=False runs the notebook already opened by `open_lesson`.
    """
    if navigate:
        open_lesson(page, url)
    statusbar = page.locator("#jp-main-statusbar")
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.locator(".tr-live .tr-view").first.wait_for(timeout=90_000)
    page.wait_for_function("() => [...document.querySelectorAll('.jp-InputPrompt')]"
                           ".every(p => !p.textContent.includes('*'))", timeout=90_000)
    statusbar.get_by_text(IDLE).wait_for(timeout=90_000)
    # The first live widget with a slider; a lesson whose widgets have none is driven by a
    # checkbox.
    with_slider = page.locator(".tr-live", has=page.locator(".widget-slider"))
    live = with_slider.first if with_slider.count() else page.locator(".tr-live").first
    handle = (live.locator(".widget-slider .noUi-handle").first if with_slider.count()
              else None)
    checkbox = live.locator(".widget-checkbox input").first
    view = live.locator(".tr-view").first
    times, key = [], "ArrowRight"
    for _ in range(presses):
        before = view.inner_html()
        target = handle if handle is not None else checkbox
        # Time in the page: from the key press or click on the control to the view's next
        # DOM change.
        target.evaluate("""(control, view) => { window.__trDone = new Promise(resolve => {
            const observer = new MutationObserver(() => {
                observer.disconnect(); resolve(performance.now()); });
            observer.observe(view, {subtree: true, childList: true, characterData: true,
                                    attributes: true});
            for (const type of ['keydown', 'click'])
                control.addEventListener(type, () => {
                    window.__trStart = performance.now(); }, {once: true, capture: true});
            }); }""", view.element_handle())
        if handle is not None:
            aria = ("aria-valuenow", "aria-valuemin", "aria-valuemax")
            now, low, high = (float(handle.get_attribute(a)) for a in aria)
            # bounce at the ends
            key = "ArrowLeft" if now >= high else "ArrowRight" if now <= low else key
            handle.focus()
            page.keyboard.press(key)
        else:
            checkbox.click()
        done = page.evaluate("() => Promise.race([window.__trDone, "
                             "new Promise(r => setTimeout(() => r(null), 5000))])")
        if done is None:
            raise AssertionError(
                "the widget's view did not change within 5 s of moving its control")
        times.append(done - page.evaluate("() => window.__trStart"))
        if view.inner_html() == before:
            raise AssertionError(
                "the control moved but the widget's view shows the same content")
        page.wait_for_timeout(pause_ms)
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        live.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot))
    return times
