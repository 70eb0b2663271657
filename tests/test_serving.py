"""The course's Jupyter servers send kernel messages without Nagle's delay (course_lib/serving.py)."""

import subprocess
import sys

from course_lib.serving import PromptKernelConnection

SERVER_CLASS = """
from jupyter_server.serverapp import ServerApp
app = ServerApp.instance()
app.initialize(argv=["--allow-root", "--port=0", "--ServerApp.open_browser=False"])
print(app.kernel_websocket_connection_class.__module__ + "." + app.kernel_websocket_connection_class.__name__)
"""


def test_a_server_run_from_the_venv_uses_the_prompt_connection(tmp_path):
    """`make setup` writes the setting into the venv: every server started from it reads it."""
    run = subprocess.run([sys.executable, "-c", SERVER_CLASS], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=True)
    assert run.stdout.strip().splitlines()[-1] == "course_lib.serving.PromptKernelConnection", run.stderr[-2000:]


class FakeHandler:
    def __init__(self):
        self.nodelay = []

    def set_nodelay(self, value: bool) -> None:
        self.nodelay.append(value)


def test_connecting_turns_nagle_off_before_anything_is_sent(monkeypatch):
    sent_before = []
    monkeypatch.setattr("jupyter_server.services.kernels.connection.channels."
                        "ZMQChannelsWebsocketConnection.connect",
                        lambda self: sent_before.append(list(self.websocket_handler.nodelay)))
    connection = PromptKernelConnection.__new__(PromptKernelConnection)
    handler = FakeHandler()
    connection._trait_values = {"websocket_handler": handler}  # a handler without a real socket
    connection.connect()
    assert handler.nodelay == [True] and sent_before == [[True]]
