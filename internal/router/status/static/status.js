// Live status: lifecycle events arrive over Server-Sent Events and are
// prepended to the list; each one (and a slow timer, for what publishes no
// event) re-fetches the server-rendered part of the page (#live's
// data-src). Actions (destroy, freeze, thaw, checkpoint) are links to a
// confirmation form; here they confirm inline and post in place, with the
// page's form token, then re-fetch. Event text is set with textContent
// only: nothing from an event is parsed as HTML.
"use strict";
(function () {
  var list = document.getElementById("events");
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  var tokenMeta = document.querySelector('meta[name="sandgate-form-token"]');
  if (!live) return;
  var only = list && list.getAttribute("data-sandbox"); // one sandbox's page
  var maxItems = 200, pending = null, confirming = null;

  function refresh() {
    pending = null;
    if (confirming) return; // a re-render would drop the open confirmation
    fetch(live.getAttribute("data-src"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok && r.status !== 404) throw new Error(r.status); return r.text(); })
      .then(function (html) { if (!confirming) live.innerHTML = html; }) // our own server-rendered, escaped fragment
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
    if (e.cause) li.append(" — ", text("span", e.cause, "reason"));
    li.append(" ", text("small", e.replica || ""));
    return li;
  }

  function flash(msg, cls) {
    var p = document.getElementById("flash");
    if (!p) {
      p = document.createElement("p");
      p.id = "flash";
      live.parentNode.insertBefore(p, live);
    }
    p.className = cls;
    p.setAttribute("role", cls === "error" ? "alert" : "status");
    p.textContent = msg;
  }

  // An action link becomes "Freeze this sandbox? [Freeze] [Cancel]".
  function ask(a) {
    if (confirming) confirming.cancel();
    var action = a.getAttribute("data-action");
    var verb = action.charAt(0).toUpperCase() + action.slice(1);
    var box = text("span", verb + " this sandbox? ", "confirm");
    var label = null;
    if (action === "checkpoint") {
      label = document.createElement("input");
      label.placeholder = "label (optional)";
      label.maxLength = 200;
      box.append(label, " ");
    }
    var yes = text("button", verb, "yes"), no = text("button", "Cancel", "no");
    yes.type = no.type = "button";
    box.append(yes, " ", no);
    a.hidden = true;
    a.after(box);
    confirming = {
      cancel: function () { box.remove(); a.hidden = false; confirming = null; }
    };
    no.onclick = function () { confirming.cancel(); };
    yes.onclick = function () {
      yes.disabled = no.disabled = true;
      var body = new URLSearchParams({ csrf: tokenMeta ? tokenMeta.content : "" });
      if (label && label.value) body.set("label", label.value);
      fetch(a.href, { method: "POST", body: body, credentials: "same-origin", cache: "no-store",
        headers: { Accept: "application/json" } })
        .then(function (r) {
          return r.json().then(function (j) {
            if (!r.ok) throw new Error((j.error && j.error.message) || r.status);
            return j;
          });
        })
        .then(function (j) { flash("Sandbox " + j.done + ".", "done"); })
        .catch(function (err) { flash(verb + " failed: " + err.message, "error"); })
        .then(function () { if (confirming) confirming.cancel(); refresh(); });
    };
    yes.focus();
  }
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("a.act");
    if (!a || !tokenMeta) return; // no token (a header-authenticated view): the form page
    ev.preventDefault();
    ask(a);
  });

  setInterval(refresh, 5000);
  if (!list || !window.EventSource) return;
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
    if (only && e.sandbox_id !== only) return;
    list.insertBefore(item(e), list.firstChild);
    while (list.children.length > maxItems) list.removeChild(list.lastChild);
    soon();
  });
})();
