// Live status: lifecycle events arrive over Server-Sent Events and are
// prepended to the list; each one (and a slow timer, for what publishes no
// event) re-fetches the server-rendered tables. Event text is set with
// textContent only: nothing from an event is parsed as HTML.
"use strict";
(function () {
  var list = document.getElementById("events");
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  if (!list || !live || !window.EventSource) return;
  var maxItems = 200, pending = null;

  function refresh() {
    pending = null;
    fetch("/status/sandboxes", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) { live.innerHTML = html; }) // our own server-rendered, escaped fragment
      .catch(function () {});
  }
  function soon() { if (!pending) pending = setTimeout(refresh, 150); }

  function text(tag, s, cls) {
    var el = document.createElement(tag);
    el.textContent = s;
    if (cls) el.className = cls;
    return el;
  }
  function item(e) {
    var li = document.createElement("li");
    li.className = "ev fresh ev-" + e.type;
    var t = text("time", new Date(e.time).toISOString().substr(11, 8));
    t.setAttribute("datetime", e.time);
    li.append(t, " ", text("b", e.type), " ", text("span", (e.user || "") + "/" + (e.thread || ""), "who"),
      " ", text("code", e.sandbox_id || ""));
    if (e.backend) li.append(" on " + e.backend);
    if (e.reason) li.append(" — ", text("span", e.reason, "reason"));
    li.append(" ", text("small", e.replica || ""));
    return li;
  }

  var es = new EventSource("/status/events");
  es.onopen = function () {
    state.textContent = "(live)";
    document.body.setAttribute("data-live", "on");
  };
  es.onerror = function () {
    state.textContent = "(reconnecting…)";
    document.body.setAttribute("data-live", "off");
  };
  es.addEventListener("lifecycle", function (m) {
    var e;
    try { e = JSON.parse(m.data); } catch (_) { return; }
    list.insertBefore(item(e), list.firstChild);
    while (list.children.length > maxItems) list.removeChild(list.lastChild);
    soon();
  });
  setInterval(refresh, 5000);
})();
