// The class's one JupyterLab addition, written by hand (no build step): nbgrader's Assignments
// tab shows "(view feedback)" after Fetch Feedback, and clicking it only shows the feedback's
// folder in the file browser (it runs filebrowser:go-to-path on <set>/feedback/<time>). This
// plugin then opens the feedback page itself, each .html in that folder, in JupyterLab's HTML
// viewer (sandboxed: no scripts run in it unless the student trusts the page).
// Jupyter Notebook's file browser (/tree, which every student's server also serves) has the same
// Assignments tab, but opens a document in a new browser tab, from a script that runs after the
// click: a popup blocker (Safari's always) stops that, and the student saw the folder. There the
// page replaces the folder in the same browser tab (Notebook's /edit/ view: the same HTML viewer).
//
// It also keeps the instructor's Nbgrader menu to one formgrader entry. nbgrader adds "Formgrader
// (local)" (a course folder per JupyterLab tab, which nbgrader warns against on a shared server)
// whenever its setting "Allow local nbgrader config file" is on, which hub.py's seeded settings
// leave off but the Settings Editor (or any settings file) turns on: the entry is hidden in the
// menu and the command palette whatever the setting says.
//
// It is a module federation container, as JupyterLab loads prebuilt extensions: `init` receives
// the shared modules (none needed), `get("./extension")` returns the module whose default export
// is the plugin. hub/jupyterhub_config.py puts this folder on the servers' JUPYTER_PATH.
var _JUPYTERLAB;
(function () {
  "use strict";
  var FEEDBACK_FOLDER = /(^|\/)feedback\/[^/]+\/?$/;
  var LOCAL_FORMGRADER = ["lm-Menu-item", "lm-CommandPalette-item"]; // where the entry shows
  var NOTEBOOK = false; // Jupyter Notebook's pages, not JupyterLab (set at activation)

  function editUrl(path) { // Notebook's page for a file: <base url>edit/<path, each part encoded>
    var config = JSON.parse(document.getElementById("jupyter-config-data").textContent);
    return config.baseUrl + "edit/" + path.split("/").map(encodeURIComponent).join("/");
  }

  var plugin = {
    id: "transformer-roots-feedback-link:plugin",
    description: "Opens the feedback page from nbgrader's (view feedback).",
    autoStart: true,
    activate: function (app) {
      NOTEBOOK = app.name === "Jupyter Notebook";
      var hide = document.createElement("style");
      hide.textContent = LOCAL_FORMGRADER.map(function (kind) {
        return "." + kind + '[data-command="nbgrader:open-formgrader-local"]';
      }).join(", ") + " { display: none !important; }";
      document.head.appendChild(hide);
      app.commands.commandExecuted.connect(function (_, executed) {
        var path = String((executed.args && executed.args.path) || "");
        if (executed.id !== "filebrowser:go-to-path" || !FEEDBACK_FOLDER.test(path)) {
          return;
        }
        app.serviceManager.contents.get(path, { content: true }).then(function (folder) {
          var pages = folder.content
            .filter(function (item) { return item.type === "file" && /\.html$/.test(item.name); });
          if (NOTEBOOK && pages.length) {
            pages.slice(1).forEach(function (item) { window.open(editUrl(item.path), "_blank"); });
            window.location.assign(editUrl(pages[0].path));
            return;
          }
          pages.forEach(function (item) {
            app.commands.execute("docmanager:open", { path: item.path, factory: "HTML Viewer" });
          });
        });
      });
    }
  };

  _JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB;
  _JUPYTERLAB["transformer-roots-feedback-link"] = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension" && module !== "./index") {
        return Promise.reject(new Error("transformer-roots-feedback-link has no module " + module));
      }
      return Promise.resolve(function () { return { __esModule: true, default: plugin }; });
    }
  };
})();
