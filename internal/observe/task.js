(function () {
  "use strict";
  var key = "slotd-token";
  var box = document.getElementById("actions");
  var token = document.getElementById("token");
  var label = document.getElementById("token-label");
  var forget = document.getElementById("forget");
  var result = document.getElementById("result");
  if (!box || !token || !forget || !result) {
    return;
  }
  var task = box.getAttribute("data-task");
  function stored() {
    try {
      return window.sessionStorage.getItem(key) || "";
    } catch (e) {
      return "";
    }
  }
  function keep(value) {
    try {
      if (value) {
        window.sessionStorage.setItem(key, value);
      } else {
        window.sessionStorage.removeItem(key);
      }
    } catch (e) {}
    var has = stored() !== "";
    label.hidden = has;
    forget.hidden = !has;
  }
  function show(text, ok) {
    result.textContent = text;
    result.className = ok ? "answer-ok" : "answer-error";
  }
  // One idempotency key per action: the clicks of a double click (or
  // of an impatient one) within keyFor ms of each other send one key, so
  // that they start one run, even across a second boundary.
  var keyFor = 3000;
  var last = null;
  function actionKey() {
    var now = Date.now();
    if (!last || now - last.at > keyFor) {
      var b = new Uint8Array(12);
      window.crypto.getRandomValues(b);
      var hex = "";
      for (var i = 0; i < b.length; i++) {
        hex += ("0" + b[i].toString(16)).slice(-2);
      }
      last = { key: "page-" + hex, at: now };
    }
    last.at = now;
    return last.key;
  }
  box.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-action]");
    if (!b) {
      return;
    }
    var action = b.getAttribute("data-action");
    var bearer = stored() || token.value.trim();
    if (!bearer) {
      show("Enter the API token first (the daemon's [http] token_file or token_env).", false);
      token.focus();
      return;
    }
    token.value = "";
    keep(bearer);
    show(action + ": sending…", true);
    var headers = { "Authorization": "Bearer " + bearer };
    if (action === "trigger") {
      headers["Idempotency-Key"] = actionKey();
    }
    fetch("../api/v1/tasks/" + encodeURIComponent(task) + "/" + action, {
      method: "POST",
      headers: headers,
      credentials: "omit",
      cache: "no-store"
    }).then(function (res) {
      return res.text().then(function (body) {
        if (res.status === 401 || res.status === 403) {
          keep("");
        }
        var text = action + ": " + res.status + " " + res.statusText;
        if (body) {
          text += "\n" + body.slice(0, 4096);
        }
        show(text, res.ok);
      });
    }).catch(function (err) {
      show(action + ": " + err, false);
    });
  });
  forget.addEventListener("click", function () {
    keep("");
    show("The token is forgotten.", true);
  });
  keep(stored());
}());
