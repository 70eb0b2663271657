"""The learner's JupyterLab (`make lab`, the student copy's too): what plain JSON cannot say.

Read because `make lab` puts learner-lab/ first on JUPYTER_CONFIG_PATH (and scripts/lab_driver.py
does so for the tests); jupyter_server_config.json beside it is read after this file. The class
hub's students do not read it: scripts/hub.py gives them learner-lab/'s JSON files only, and their
exchange is the hub's.

- The first view: the start page, START.md (lessons and exercise sets in order), rendered, with the
  file browser on the course's folder, its names given the panel's width: no Last Modified column
  (settings/overrides.json), and a panel wide enough for the longest (a new learner's workspace).
- The Nbgrader menu's Assignment List only where there is a class: nbgrader's exchange (a shared
  folder an instructor makes) exists. Without one, the list can only answer "Error fetching
  courses!" and "The exchange directory does not exist", which a learner alone can do nothing about.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WITHOUT_A_CLASS = ["@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu"]

c = get_config()  # noqa: F821 (provided by Jupyter when it loads this file)


def exchange_exists() -> bool:
    """Whether the exchange nbgrader's assignment list would use exists: configured the way its
    own server extension reads it (the Jupyter configuration path, then the folder the server
    starts in); by default /srv/nbgrader/exchange."""
    from nbgrader.exchange import ExchangeFactory
    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList

    try:
        config = AssignmentList().load_config()
        return Path(ExchangeFactory(config=config).List(config=config).root).is_dir()
    except Exception:  # a configuration that does not load: leave the list, and its own error, alone
        return True


def assignment_list_if_a_class(handler, page_config: dict) -> dict:
    """JupyterLab's page configuration, without a class's exchange: with nbgrader's Assignment List
    plugin turned off, and its Nbgrader menu, which would be left empty (the learner's other
    entries are off already). Asked at each page load, not at start: loading nbgrader's
    configuration can take seconds (the course's imports torch), and an exchange made later counts."""
    if not exchange_exists():
        page_config["disabledExtensions"] = [*page_config.get("disabledExtensions", []), *WITHOUT_A_CLASS]
    return page_config


def server_root() -> Path:
    """The folder JupyterLab serves, as the server being configured has it: its command line
    (`--ServerApp.root_dir=.`, or a folder as in `jupyter lab notebooks`) is read before this file."""
    from jupyter_server.serverapp import ServerApp

    return Path(ServerApp.instance().root_dir) if ServerApp.initialized() else Path.cwd()


def workspaces_dir() -> Path:
    """The folder JupyterLab keeps its workspaces in: `--LabApp.workspaces_dir` if given, otherwise
    JupyterLab's own choice (JUPYTERLAB_WORKSPACES_DIR, else ~/.jupyter/lab/workspaces)."""
    from jupyter_server.serverapp import ServerApp
    from jupyterlab.commands import get_workspaces_dir

    given = ServerApp.instance().config.get("LabApp", {}).get("workspaces_dir") if ServerApp.initialized() else None
    return Path(str(given) if given else get_workspaces_dir())


def seed_first_workspace() -> None:
    """A new learner's first view: the file browser open and the left panel 28% of the width beside
    the side bars (340 px in a 1280 px window, 1208 px beside them), where JupyterLab's default
    is its 250 px minimum and cuts "04_positional_encoding_exercises.ipynb" (259 px of text;
    the name gets the panel's width less 48 px). JupyterLab has no setting for that width, but
    restores it from the saved layout of the workspace a page opens, "default" for
    /lab/tree/START.md. Written only where that workspace does not exist yet: JupyterLab saves
    the learner's own layout (a panel resized, tabs) over it from the first page on, and a later
    start leaves that alone. The layout must say the file browser is open ("left"): a saved
    layout without it opens with the panel closed (JupyterLab opens the file browser itself only
    when there is no saved layout). Never written in the repository: a per-user folder."""
    from jupyterlab_server.workspaces_handler import WORKSPACE_EXTENSION, slugify

    layout = {"left": {"collapsed": False, "visible": True, "current": "filebrowser", "widgets": ["filebrowser"]},
              # [left panel, main area, right panel], as fractions of the width beside the side bars
              "relativeSizes": [0.28, 0.72, 0]}
    workspace = {"data": {"layout-restorer:data": layout}, "metadata": {"id": "default"}}
    folder = workspaces_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{slugify('default')}{WORKSPACE_EXTENSION}", "x", encoding="utf-8") as file:
            json.dump(workspace, file)
    except OSError:  # the learner's own workspace (FileExistsError), or a folder we may not write to
        pass


# The start page opens rendered (a Markdown file otherwise opens in the text editor); the file
# browser drops its Last Modified column, so a name has the panel's width. Only app_settings_dir's
# overrides.json sets defaults, so the venv's (see the Makefile's setup) is repeated there.
c.LabApp.app_settings_dir = str(HERE / "settings")
# Served from elsewhere (`jupyter lab notebooks`), JupyterLab would open on "Cannot open: Could not
# find path: START.md": there it opens as it would without this file.
if (server_root() / "START.md").is_file():
    c.LabApp.default_url = "/lab/tree/START.md"
c.ServerApp.tornado_settings = {"page_config_hook": assignment_list_if_a_class}
seed_first_workspace()
