"""JupyterHub for one class of Transformer Roots on one machine (`make hub`; scripts/hub.py).

`scripts/hub.py setup` (as root) makes the class: a unix user per student and instructor, the
nbgrader exchange, the instructor's course folder, and `<state>/class.json`, which this file
reads. `scripts/hub.py start` runs JupyterHub with this file. Everything below comes from
class.json or from these environment variables:

  TR_HUB_STATE        the class's state folder (default /srv/transformer-roots-hub)
  TR_HUB_IP           where the proxy listens: "" = every interface (default), 127.0.0.1 = this machine
  TR_HUB_PORT         the port users open (default 8000)
  TR_HUB_API_PORT     the hub's own port, on 127.0.0.1 only (default 8081)
  TR_HUB_PROXY_API_PORT  the proxy's REST API, on 127.0.0.1 only (default 8001)
  TR_HUB_IDLE_SECONDS a server idle this long is stopped by the idle culler (default 3600)
  TR_HUB_SSL_CERT, TR_HUB_SSL_KEY  TLS for the public port (or put the hub behind a TLS proxy)

Authentication, one of two:
  - real (default): PAM, the unix password of each user `hub.py setup` made. Setup gives each a
    first password of its own, listed in <state>/hub/first-passwords.csv (root only) for the
    instructor to hand out; a user changes it with `passwd` in a JupyterLab terminal. Only the
    roster's students and the instructors can log in, whatever other accounts the machine has.
    (NativeAuthenticator 1.3.0, where students pick their own password at sign-up, fails every
    login on JupyterHub 6.1.1: its login handler uses `self.statsd`, which JupyterHub 6 removed.
    PAM gives nothing more away: a student with a JupyterLab terminal has a shell already.)
  - test mode, for the tests only: TR_HUB_TEST_PASSWORD (students, at least 8 characters) and
    TR_HUB_TEST_ADMIN_PASSWORD (instructors, at least 32) select JupyterHub's shared-password
    authenticator. It refuses to start unless TR_HUB_IP is 127.0.0.1: anyone who knows the
    shared password could log in as any student.
"""

import json
import os
import pwd
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT / "scripts"))
import hub as class_hub  # noqa: E402  (scripts/hub.py: the limits, and how a server is confined)
from grading.cgroup import Group  # noqa: E402
VENV_BIN = Path(sys.executable).parent  # hub.py starts JupyterHub with the course's .venv
STATE = Path(os.environ.get("TR_HUB_STATE", "/srv/transformer-roots-hub"))
CLASS = json.loads((STATE / "class.json").read_text())  # written by `hub.py setup`
IP = os.environ.get("TR_HUB_IP", "")
PORT = int(os.environ.get("TR_HUB_PORT", "8000"))
RUNTIME = ".jr"  # kept short: see hub.py's MAX_HOME

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

# --- Network: only the proxy faces users; the hub and the proxy's API stay on this machine.
c.JupyterHub.bind_url = f"http://{IP}:{PORT}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("TR_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('TR_HUB_PROXY_API_PORT', '8001')}"
# configurable-http-proxy from npm, installed in the checkout by `make hub` (`make hub-proxy`).
c.ConfigurableHTTPProxy.command = [str(CHECKOUT / ".hub" / "node_modules" / ".bin" / "configurable-http-proxy")]
if os.environ.get("TR_HUB_SSL_CERT"):
    c.JupyterHub.ssl_cert = os.environ["TR_HUB_SSL_CERT"]
    c.JupyterHub.ssl_key = os.environ["TR_HUB_SSL_KEY"]

# --- The hub's own files, in a folder only root can read (setup makes it 0700).
c.JupyterHub.db_url = f"sqlite:///{STATE / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "hub" / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "hub" / "proxy.pid")

# --- Who may log in: the roster's students and the instructors; instructors are the admins.
students = [s["id"] for s in CLASS["students"]]
instructors = [i["id"] for i in CLASS["instructors"]]
c.Authenticator.allowed_users = set(students) | set(instructors)
c.Authenticator.admin_users = set(instructors)

test_password = os.environ.get("TR_HUB_TEST_PASSWORD")
if test_password:
    if IP != "127.0.0.1":
        raise SystemExit("test mode (TR_HUB_TEST_PASSWORD) shares one password among all students: "
                         "it listens on 127.0.0.1 only (set TR_HUB_IP=127.0.0.1), never on a network")
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = test_password
    c.SharedPasswordAuthenticator.admin_password = os.environ["TR_HUB_TEST_ADMIN_PASSWORD"]
else:
    c.JupyterHub.authenticator_class = "pam"  # checks the password and that the account is valid

# --- nbgrader's groups: "formgrade-<course>" for who grades, "nbgrader-<course>" for students
# (the names nbgrader's JupyterHubAuthPlugin reads, should the class grow to several graders).
course = CLASS["course_id"]
c.JupyterHub.load_groups = {f"formgrade-{course}": {"users": instructors},
                            f"nbgrader-{course}": {"users": students}}

# --- Each user's server: their own unix user (the hub runs as root and drops to that user),
# the course's Python environment, JupyterLab, started in their home folder.
# A student's server, with everything it starts, runs within the class's limits (set once, at
# setup, in class.json; scripts/hub.py says what each covers): a control group for memory, tasks
# and CPU share, and a mount namespace with their own /tmp, /var/tmp and /dev/shm of a fixed size
# (their home is a disk image of its own, mounted by `hub.py start`). Instructors are not limited:
# grading runs in their server.
LIMITS = class_hub.ClassLimits(**CLASS.get("limits", {}))
class_hub.make_class_group(LIMITS, len(students))
KEEP = [Path(CLASS["homes"]), STATE, CHECKOUT]  # what a private /tmp must still show, should it be there


class ClassSpawner(LocalProcessSpawner):
    def make_preexec_fn(self, name):
        as_user = super().make_preexec_fn(name)
        if name not in students:
            return as_user
        group = Group.make(class_hub.group_name(name), LIMITS.cgroup())  # here, in the hub, as root
        private_mounts = class_hub.confine(LIMITS, KEEP)

        def preexec():  # after fork, before exec: still root until as_user()
            group.enter()
            private_mounts()
            as_user()
        return preexec

    def get_env(self):
        env = super().get_env()
        if self.user.name in students:  # the limits and counters the kernel's notice reads
            env |= class_hub.notice_environment(self.user.name, LIMITS)
        return env

    async def stop(self, now=False):
        await super().stop(now=now)
        if self.user.name in students:  # what the server left running (a terminal's nohup, say) ends with it
            Group.find(class_hub.group_name(self.user.name)).remove()


c.JupyterHub.spawner_class = ClassSpawner
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = {
    # nbgrader runs `alembic` (the gradebook) and kernels start from PATH: the venv comes first.
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
    # The class's nbgrader settings, made by setup: STATE/etc/jupyter/nbgrader_config.py (course
    # id, exchange folder). Each user's own ~/.jupyter (also made by setup) names the server
    # extensions their server runs.
    "JUPYTER_CONFIG_PATH": str(STATE / "etc" / "jupyter"),
    # Kernel sockets (below) and the server's runtime files: in the user's home, on a short path.
    "JUPYTER_RUNTIME_DIR": lambda spawner: f"{pwd.getpwnam(spawner.user.name).pw_dir}/{RUNTIME}",
    # The class's kernel spec (hub.py setup): the course's Python with grading/notice.py, which
    # names the limit a student's work hits; and hub/jupyter's JupyterLab addition, which makes
    # nbgrader's "(view feedback)" open the feedback page, not only its folder (in JupyterLab and in
    # Jupyter Notebook's /tree), and keeps the instructor's menu to one Formgrader entry.
    "JUPYTER_PATH": os.pathsep.join([str(STATE / "share" / "jupyter"), str(CHECKOUT / "hub" / "jupyter")]),
}
# Kernels talk to their server over unix sockets, not TCP ports. When a class starts together,
# servers that each pick "free" TCP ports for their kernels at the same moment collide: with 16
# students starting at once (scripts/hub_sizing.py), kernels died with "Address already in use"
# and their students' websockets closed. A socket file in the user's own home cannot collide,
# and only its user can open it.
c.Spawner.args = ["--KernelManager.transport=ipc"]
# A first start imports torch and JupyterLab from a cold disk: allow it time.
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

# --- Idle servers are stopped, freeing their memory; the user's files stay.
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                f"--timeout={os.environ.get('TR_HUB_IDLE_SECONDS', '3600')}"],
}]
c.JupyterHub.load_roles = [{
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}]
# Shutting the hub down stops every user's server too (the default, said here on purpose).
c.JupyterHub.cleanup_servers = True
