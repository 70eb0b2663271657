# Transformer Roots. `make lab` opens the course; `make test` runs the tests (`make test-all` the rest).
# Both create .venv and install everything on first use (shared setup: the `setup` target).

# The Pythons tried for .venv, in order: the first that this course supports (pyproject.toml's
# requires-python) and that can create a venv is used; 3.11 is the one the tests run on. When
# none can, scripts/find_python.sh says in one line what to install. To choose: PYTHON=python3.13
PYTHON ?= python3.11 python3.12 python3.13 python3.14 python3 python
# Linux gets torch's CPU build from PyTorch's index: PyPI's Linux torch is the CUDA build (several
# GB). `make lab TORCH_INDEX=` takes PyPI's instead; TORCH_INDEX=https://download.pytorch.org/whl/cu128
# a CUDA build. macOS and Windows: PyPI's torch is already the CPU build.
TORCH_INDEX ?= $(if $(filter Linux,$(shell uname -s)),https://download.pytorch.org/whl/cpu)
TORCH = $(shell sed -n 's/^ *"\(torch==[^"]*\)".*/\1/p' pyproject.toml)
VENV   := .venv
BIN    := $(abspath $(VENV))/bin
STAMP  := $(VENV)/.installed
# make site's own installs (and make test-all's, which tests the site): the `site` extra, and MathJax.
SITE_STAMP := $(VENV)/.site-installed
MATHJAX := .site/node_modules/mathjax/es5/tex-chtml-full.js
# nbgrader runs `alembic` and jupyter runs its kernels from PATH: the venv's bin comes first.
export PATH := $(BIN):$(PATH)
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup lab instructor-lab test test-all grade bench stability notebooks exercises system release clean hub hub-proxy site

# The Python chosen is named in one line. A venv that failed half-way is removed: left with no pip,
# the next run would only say "No module named pip". torch comes first and alone, from TORCH_INDEX
# (or PyPI when it is empty), and scripts/install_torch.sh says in words why when it cannot.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { python=$$(sh scripts/find_python.sh $(PYTHON)) \
		&& echo "make: .venv gets $$("$$python" -c 'import platform; print("Python", platform.python_version())') ($$python)" \
		&& { "$$python" -m venv $(VENV) || { rm -rf $(VENV); exit 1; }; }; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	sh scripts/install_torch.sh $(BIN)/python '$(TORCH)' '$(TORCH_INDEX)'
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# A lesson the learner saves keeps its widgets' state, so on reopening each widget still
	@# shows its last view instead of "Error displaying widget: model not found".
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@echo '{"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	@touch $@

# Every Jupyter server run from the venv (make lab, the hub's student servers, the tests') sends
# kernel messages without Nagle's delay: see course_lib/serving.py.
SERVER_CONFIG := $(VENV)/etc/jupyter/jupyter_server_config.json
$(SERVER_CONFIG): $(STAMP)
	@mkdir -p $(dir $@)
	@echo '{"ServerApp": {"kernel_websocket_connection_class": "course_lib.serving.PromptKernelConnection"}}' > $@

# An instructor's server (make lab, the hub's) renders submissions in the formgrader through
# grading/sanitize.py, which answers those pages with a strict CSP. The student copy has no grading/.
GRADING_CONFIG := $(VENV)/etc/jupyter/jupyter_server_config.d/transformer-roots-grading.json
$(GRADING_CONFIG): $(STAMP)
	@mkdir -p $(dir $@)
	@echo '{"ServerApp": {"jpserver_extensions": {"grading.sanitize": true}}}' > $@

# Validate (the button in an exercise set, and `nbgrader validate`) ends with a one-line summary:
# exercises that pass and their points (course_lib/validation.py). The course's and the student copy's.
VALIDATE_CONFIG := $(VENV)/etc/jupyter/nbgrader_config.py
$(VALIDATE_CONFIG): scripts/nbgrader_validate_config.py $(STAMP)
	@mkdir -p $(dir $@)
	@cp scripts/nbgrader_validate_config.py $@

setup: $(STAMP) $(SERVER_CONFIG) $(VALIDATE_CONFIG) $(if $(wildcard grading/sanitize.py),$(GRADING_CONFIG))

# A learner's JupyterLab: learner-lab/ is a Jupyter configuration folder read before the venv's. It
# keeps Validate (and nbgrader's assignment list where a class's exchange exists), and turns off what
# only an instructor uses (the formgrader, Create Assignment, the course list, with their server
# parts) and JupyterLab's "get notified about Jupyter news?" pop-up. It opens on the start page,
# START.md (learner-lab/jupyter_server_config.py), so `make lab` passes no LAB_HOME of its own.
# scripts/lab_driver.py starts the tests' JupyterLab so too.
LAB_HOME = --LabApp.default_url=/lab/tree/notebooks
LAB = $(BIN)/jupyter lab --ServerApp.root_dir=. $(LAB_HOME) $(ALLOW_ROOT)
LEARNER_CONFIG := JUPYTER_CONFIG_PATH=$(abspath learner-lab)$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))
lab: LAB_HOME =
lab: setup
	$(LEARNER_CONFIG) $(LAB)

# The instructor's JupyterLab, on the same venv: nbgrader's formgrader (Nbgrader menu) and Create
# Assignment panel, for the course's nbgrader_config.py (not in the student copy).
instructor-lab: setup
	@test -f nbgrader_config.py || { echo "make instructor-lab is the instructor's: the student copy has no \
	nbgrader_config.py (make lab opens the lessons)" >&2; exit 2; }
	$(LAB)

# Chromium (browser test) and bubblewrap (the grading sandbox), from Debian when root.
system:
	@bash scripts/ensure_system_packages.sh

NBVAL := --nbval --nbval-sanitize-with tests/sanitize.cfg -q
# Two workers, each taking a whole file at a time: a module's fixtures are made once, and a notebook's
# cells run in order in one kernel (tests/conftest.py puts the longest files first).
PARALLEL := -n 2 --dist loadfile --no-loadscope-reorder

# make test: every course_lib test, grading end to end in the sandbox, the LMS import, the browser
# test, and nbval over every lesson and solution (every claim raises if false), on this CPU's own
# kernels. A student copy (`make release`) has no tests/ or solutions/: there it checks the lessons.
test: setup system
	$(BIN)/python -m pytest $(PARALLEL) -m "not slow" $(wildcard tests) notebooks $(wildcard solutions) $(NBVAL)

# make test-all, after make test (CI runs both): the tests marked slow on two workers, then the hub's
# (a class with its latency bound, the hub's sizing), alone on the machine; the notebooks again with torch's
# portable kernels (ATEN_CPU_CAPABILITY=default, what a CPU without AVX2 gets) and the lessons on MKL's
# AVX2 path (the BLAS picks its path per processor whatever torch is told; an AMD CPU likely gets
# that one): their outputs must agree; then every claim for 5 seed shifts under each CPU kernel and
# BLAS path (make stability).
HUB_TESTS := tests/test_hub.py tests/test_hub_sizing.py
test-all: setup system $(if $(wildcard tests/test_hub.py),hub-proxy) $(if $(wildcard tests/test_site.py),$(SITE_STAMP) $(MATHJAX))
	$(if $(wildcard tests),$(BIN)/python -m pytest $(PARALLEL) -m slow tests -q $(HUB_TESTS:%=--ignore=%))
	$(if $(wildcard tests),$(BIN)/python -m pytest -m slow $(HUB_TESTS) -q)
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest $(PARALLEL) notebooks $(wildcard solutions) $(NBVAL)
	MKL_ENABLE_INSTRUCTIONS=AVX2 $(BIN)/python -m pytest $(PARALLEL) notebooks $(NBVAL)
	$(if $(wildcard tests/test_claim_stability.py),$(BIN)/python scripts/claim_stability.py)

# SUBMISSIONS: a folder of <student>/<set>/, or a zip downloaded from Canvas or Moodle, with
# optionally ROSTER=roster.csv (student id, name, LMS user id), LMS=canvas|moodle, SET=<set>.
grade: setup system
	$(BIN)/python scripts/grade.py $(if $(SUBMISSIONS),--submissions $(SUBMISSIONS)) \
		$(if $(ROSTER),--roster $(ROSTER)) $(if $(LMS),--lms $(LMS)) $(if $(SET),--set $(SET))

exercises: setup
	$(BIN)/python scripts/grade.py --exercises-only

notebooks: setup
	$(BIN)/python scripts/execute_notebooks.py notebooks solutions
	$(MAKE) exercises

# The student copy of the course, for a public class repository: make release DEST=../course-public
release: setup
	@test -n "$(DEST)" || { echo "usage: make release DEST=<new folder>"; exit 2; }
	$(BIN)/python scripts/release.py $(DEST)

bench: setup system
	$(BIN)/python scripts/bench.py

# Every lesson again with 5 seed shifts under each CPU kernel this machine has: the claims that
# flip and each claim's smallest margin (scripts/claim_stability.py).
stability: setup
	$(BIN)/python scripts/claim_stability.py

# The course as a static website, site/_build/html (open its index.html): the lessons with their
# committed outputs, the exercise sets' student versions, the guides and a glossary, with search.
# Nothing is run, so it builds in seconds (scripts/build_site.py). Sphinx and MyST-NB are the `site`
# extra, installed here only, so make lab and make test stay as fast; MathJax comes from npm
# (site/package-lock.json pins it) into the site itself, so its math renders with no network.
# The student copy (make release) has no site/: there it says so.
site: setup $(if $(wildcard scripts/build_site.py),$(SITE_STAMP) $(MATHJAX))
	@test -f scripts/build_site.py || { echo "make site builds the course's website in the instructor's \
	copy of the course: this copy has no site/" >&2; exit 2; }
	$(BIN)/python scripts/build_site.py --mathjax .site/node_modules/mathjax
$(SITE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[site]'
	@touch $@
$(MATHJAX): site/package.json site/package-lock.json
	@command -v npm >/dev/null || { echo "make site copies MathJax from npm: it needs Node.js with npm \
	(https://nodejs.org, or Debian's nodejs and npm)" >&2; exit 1; }
	mkdir -p .site && cp site/package.json site/package-lock.json .site/
	cd .site && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# One JupyterHub for a class on this machine (docs/hub.md). As root:
# the first run makes the class from ROSTER (default hub/roster.csv: a unix user per student and
# per instructor, the exchange, the grader's course folder), every run starts the hub in the
# foreground (Ctrl+C stops it).
INSTRUCTORS ?= instructor
HUB_STATE ?= /srv/transformer-roots-hub
hub: setup system hub-proxy
	@test "$$(id -u)" = 0 || { echo "make hub needs root: it makes a unix user per student and runs each \
	student's server as that user (sudo make hub)" >&2; exit 1; }
	test -f $(HUB_STATE)/class.json || $(BIN)/python scripts/hub.py setup --roster $(or $(ROSTER),hub/roster.csv) \
		$(foreach id,$(INSTRUCTORS),--instructor $(id)) --state $(HUB_STATE)
	$(BIN)/python scripts/hub.py start --state $(HUB_STATE)

# The hub's proxy, configurable-http-proxy from npm, into .hub/ once (hub/package-lock.json pins it
# and every dependency). It needs Node.js 20 or later.
HUB_PROXY := .hub/node_modules/.bin/configurable-http-proxy
hub-proxy: $(HUB_PROXY)
$(HUB_PROXY): hub/package.json hub/package-lock.json
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' 2>/dev/null || { echo "the hub's \
	proxy needs Node.js 20 or later with npm (https://nodejs.org, or NodeSource's Debian packages)" >&2; exit 1; }
	mkdir -p .hub && cp hub/package.json hub/package-lock.json .hub/
	cd .hub && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

clean:
	rm -rf $(VENV) .hub gradebook.db submitted autograded feedback grades.csv canvas-grades.csv \
		moodle-grades-*.csv test-artifacts .site site/_build
