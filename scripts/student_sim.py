"""A simulated student: one kernel on a Jupyter server, lesson 01 run, its widget moved.

Speaks to the server as JupyterLab does: the REST API starts a kernel, one websocket carries
the kernel's messages (Jupyter's JSON protocol), and a slider is moved by sending the
`update` comm message the browser's widget manager sends. A round trip is the time from
that message to the kernel's update of the widget's view: the browser's drawing is not in
it (the browser test measures that), the server's, the proxy's and the kernel's work are.

Used by scripts/hub_sizing.py (many students on one hub) and, through it, tests/test_hub_sizing.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "notebooks" / "01_attention_scores.ipynb"
SLIDER = "angle (deg)"  # lesson 01's first widget: a query turning among keys


@dataclass
class StudentRun:
    name: str
    kernel_start_s: float = 0.0  # POST /api/kernels until the kernel answers kernel_info
    lesson_s: float = 0.0  # every code cell of lesson 01, one after another
    round_trips_ms: list[float] = field(default_factory=list)
    error: str = ""


def code_cells(notebook: Path = LESSON) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


class KernelChannel:
    """One kernel's websocket: send requests, wait for replies and widget messages."""

    def __init__(self, connection, session: str):
        self.connection = connection
        self.session = session
        self.widgets: dict[str, dict] = {}  # comm id -> the widget's state when opened
        self.updates: asyncio.Queue[tuple[str, dict, float]] = asyncio.Queue()

    def message(self, msg_type: str, content: dict, channel: str = "shell") -> dict:
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": self.session,
                           "username": "student", "version": "5.3", "date": ""},
                "parent_header": {}, "metadata": {}, "content": content, "buffers": [],
                "channel": channel}

    async def request(self, msg_type: str, content: dict, channel: str = "shell",
                      timeout: float = 300) -> list[dict]:
        """Send one request; return its messages up to the kernel's idle (and the reply)."""
        msg = self.message(msg_type, content, channel)
        await self.connection.write_message(json.dumps(msg))
        replies, idle, replied = [], False, msg_type == "comm_msg"  # a comm_msg gets no reply
        async with asyncio.timeout(timeout):
            while not (idle and replied):
                incoming = await self.receive()
                if incoming["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                    continue
                replies.append(incoming)
                kind = incoming["header"]["msg_type"]
                idle = idle or (kind == "status" and incoming["content"]["execution_state"] == "idle")
                replied = replied or kind.endswith("_reply")
        return replies

    async def receive(self) -> dict:
        raw = await self.connection.read_message()
        if raw is None:
            raise ConnectionError("the kernel's websocket closed")
        incoming = json.loads(raw)
        kind, content = incoming["header"]["msg_type"], incoming["content"]
        if kind == "comm_open" and content.get("target_name") == "jupyter.widget":
            self.widgets[content["comm_id"]] = content["data"]["state"]
        elif kind == "comm_msg":
            self.updates.put_nowait((content["comm_id"], content["data"], time.perf_counter()))
        elif kind == "error":
            raise RuntimeError(f"a lesson cell failed: {content['ename']}: {content['evalue']}")
        return incoming

    def find(self, model: str, **state) -> str:
        for comm_id, s in self.widgets.items():
            if s.get("_model_name") == model and all(s.get(k) == v for k, v in state.items()):
                return comm_id
        raise LookupError(f"no {model} widget with {state} among {len(self.widgets)} widgets")


async def start_kernel(http: AsyncHTTPClient, base: str, token: str) -> str:
    response = await http.fetch(HTTPRequest(f"{base}api/kernels", method="POST", body="{}",
                                            headers={"Authorization": f"token {token}"},
                                            request_timeout=300))
    return json.loads(response.body)["id"]


class Student:
    """One learner's kernel on the server at `base` (ending in /), driven as JupyterLab does."""

    def __init__(self, name: str, base: str, token: str):
        self.run, self.base, self.token = StudentRun(name), base, token
        self.http = AsyncHTTPClient()
        self.headers = {"Authorization": f"token {token}"}

    async def start(self) -> None:
        start = time.perf_counter()
        self.kernel = await start_kernel(self.http, self.base, self.token)
        ws = self.base.replace("http", "ws", 1) + f"api/kernels/{self.kernel}/channels"
        self.connection = await websocket_connect(HTTPRequest(ws, headers=self.headers, request_timeout=300),
                                                  max_message_size=256 * 2**20)
        # Browsers send without Nagle's delay; without this every other move waits ~40 ms
        # for a delayed ACK, which is the client's doing, not the hub's.
        self.connection.stream.set_nodelay(True)
        self.channel = KernelChannel(self.connection, uuid.uuid4().hex)
        await self.channel.request("kernel_info_request", {})
        self.run.kernel_start_s = time.perf_counter() - start

    async def run_lesson(self, cells: list[str]) -> None:
        start = time.perf_counter()
        for source in cells:
            await self.channel.request("execute_request", {"code": source, "silent": False,
                                                           "store_history": True, "allow_stdin": False})
        self.run.lesson_s = time.perf_counter() - start

    async def move_slider(self, moves: int, pause_s: float) -> None:
        """Move lesson 01's slider `moves` times, `pause_s` apart, timing each redraw."""
        slider = self.channel.find("FloatSliderModel", description=SLIDER)
        value = self.channel.widgets[slider]["value"]
        for _ in range(moves):
            value = value + 5 if value < 170 else -180.0
            while not self.channel.updates.empty():
                self.channel.updates.get_nowait()
            sent = time.perf_counter()
            update = self.channel.message("comm_msg", {"comm_id": slider, "data": {
                "method": "update", "state": {"value": value}, "buffer_paths": []}})
            await self.connection.write_message(json.dumps(update))
            await _view_changed(self.channel, slider)
            self.run.round_trips_ms.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(pause_s)

    async def stop(self) -> None:
        self.connection.close()
        await self.http.fetch(HTTPRequest(f"{self.base}api/kernels/{self.kernel}", method="DELETE",
                                          headers=self.headers))


async def _view_changed(channel: KernelChannel, slider: str, timeout: float = 30) -> None:
    """Read messages until the kernel sends a new value for an HTML view (the redraw)."""
    async def pump() -> None:
        while True:
            await channel.receive()

    reader = asyncio.ensure_future(pump())
    try:
        async with asyncio.timeout(timeout):
            while True:
                comm_id, data, _ = await channel.updates.get()
                state = data.get("state", {})
                if comm_id != slider and "value" in state and "<svg" in str(state["value"]):
                    return
    finally:
        reader.cancel()
