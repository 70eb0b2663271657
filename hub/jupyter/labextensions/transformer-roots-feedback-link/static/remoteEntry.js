// The class's one JupyterLab addition, written by hand (no build step): nbgrader's Assignments
// tab shows "(view feedback)" after Fetch Feedback, and clicking it only shows the feedback's
// folder in the file browser (it runs filebrowser:go-to-path on <set>/feedback/<time>). This
// plugin then opens the feedback page itself, each .html in that folder, in JupyterLab's HTML
// viewer (sandboxed: no scripts run in it unless the student trusts the page).
//
// It is a module federation container, as JupyterLab loads prebuilt extensions: `init` receives
// the shared modules (none needed), `get("./extension")` returns the module whose default export
// is the plugin. hub/jupyterhub_config.py puts this folder on the servers' JUPYTER_PATH.
var _JUPYTERLAB;
(function () {
  "use strict";
  var FEEDBACK_FOLDER = /(^|\/)feedback\/[^/]+\/?$/;

  var plugin = {
    id: "transformer-roots-feedback-link:plugin",
    description: "Opens the feedback page from nbgrader's (view feedback).",
    autoStart: true,
    activate: function (app) {
      app.commands.commandExecuted.connect(function (_, executed) {
        var path = String((executed.args && executed.args.path) || "");
        if (executed.id !== "filebrowser:go-to-path" || !FEEDBACK_FOLDER.test(path)) {
          return;
        }
        app.serviceManager.contents.get(path, { content: true }).then(function (folder) {
          folder.content
            .filter(function (item) { return item.type === "file" && /\.html$/.test(item.name); })
            .forEach(function (item) {
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
