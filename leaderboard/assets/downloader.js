// hoard downloader page: one downloader's work across every project, from
// /downloaders/<nick>.json. The nickname comes from the URL and everything
// is written as text (textContent), never as HTML.
(function () {
  "use strict";
  const F = window.hoardFormat;
  const $ = (sel) => document.querySelector(sel);
  const nick = decodeURIComponent(location.pathname.split("/")[2] || "");
  $("#nick").textContent = nick;
  document.title = nick + " · hoard";

  function cell(tr, text, cls, href) {
    const td = document.createElement("td");
    if (href) {
      const a = document.createElement("a");
      a.href = href;
      a.textContent = text;
      td.appendChild(a);
    } else {
      td.textContent = text;
    }
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  function say(text) {
    const m = $("#message");
    m.textContent = text;
    m.hidden = false;
  }

  async function load() {
    const res = await fetch("/downloaders/" + encodeURIComponent(nick) + ".json");
    if (res.status === 404) { say("No project here has work by " + nick + " yet."); return; }
    if (!res.ok) {
      let why = res.statusText;
      try { why = (await res.json()).error || why; } catch (e) { /* not JSON */ }
      say("Cannot show this downloader: " + why);
      return;
    }
    const c = await res.json();
    $("#total-items").textContent = F.count(c.items);
    $("#total-bytes").textContent = F.bytes(c.bytes);
    $("#total-projects").textContent = F.count((c.projects || []).length);
    const rows = document.createDocumentFragment();
    for (const p of c.projects || []) {
      const tr = document.createElement("tr");
      tr.dataset.project = p.project;
      tr.title = p.version ? "last script version " + p.version : "";
      cell(tr, p.title || p.project, "", "/" + encodeURIComponent(p.project) + "/");
      cell(tr, F.count(p.items), "num");
      cell(tr, F.bytes(p.bytes), "num");
      const r = p.recent || {};
      cell(tr, r.items ? F.perMinute(r.items_per_minute) + " · " + F.perSecond(r.bytes_per_second) : "idle", "num");
      rows.appendChild(tr);
    }
    $("#projects").replaceChildren(rows);
  }
  load().catch((err) => say("Cannot load: " + err));
  setInterval(() => load().catch(() => {}), 60000);
})();
