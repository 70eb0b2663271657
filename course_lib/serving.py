"""How the course's Jupyter servers send kernel messages to the browser: without delay.

A widget's redraw reaches the browser as a burst of small websocket messages (busy,
echo_update, update, idle). jupyter_server leaves Nagle's algorithm on for kernel
websockets, so the second message of a burst waits for the browser's TCP acknowledgement,
which Linux delays by up to 40 ms: measured on lesson 01's slider through a local server,
every other move took 44-49 ms instead of 5-7 ms. Turning Nagle off removes the wait.

`make setup` names this class in the venv's jupyter_server_config.d, so `make lab`, the
hub's student servers and the tests' servers all use it.
"""

from __future__ import annotations

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection


class PromptKernelConnection(ZMQChannelsWebsocketConnection):
    """jupyter_server's kernel websocket connection, sending each message when it is written."""

    def connect(self):
        self.websocket_handler.set_nodelay(True)
        return super().connect()
