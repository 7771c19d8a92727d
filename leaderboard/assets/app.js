// hoard project page: counts, live log, leaderboard and charts, updated
// live over a websocket. No framework and no build step.
(function () {
  "use strict";
  const slug = decodeURIComponent(location.pathname.split("/")[1] || "");
  const base = "/" + encodeURIComponent(slug);
  const $ = (sel) => document.querySelector(sel);
  const LOG_ROWS = 25, TOP_ROWS = 18;

  const LIVE_KEPT = 5000;

  // live holds the completions received live, until a stats.json read
  // after them includes them (see loadStats); statsAt is when the shown
  // stats were read; more is how many downloaders stats.json left out.
  const state = {
    downloaders: new Map(), seen: new Set(), countsAt: 0, rankBy: "bytes", showAll: false,
    live: [], statsAt: 0, more: 0, recent: new Map(),
  };

  const F = window.hoardFormat;
  const fmt = F.count, bytes = F.bytes;
  const pct = (x) => (100 * (x || 0)).toFixed(1) + "%";

  $("#title").textContent = slug;
  document.title = slug + " · hoard";

  // Counts -------------------------------------------------------------
  function applyCounts(counts, at) {
    if (!counts || at < state.countsAt) return; // never go back in time
    state.countsAt = at;
    document.querySelectorAll("[data-count]").forEach((el) => {
      const v = counts[el.dataset.count];
      if (v !== undefined) el.textContent = fmt(v);
    });
  }

  // Live log -----------------------------------------------------------
  function entryKey(e) { return e.at + " " + e.by + " " + (e.items || []).join("\u0000"); }
  // insertRow keeps the log newest first by each entry's time, so an
  // entry that arrives late (or an update before its snapshot) still lands
  // where it belongs.
  function insertRow(tbody, tr, at) {
    for (const row of tbody.rows) {
      if (Number(row.dataset.at) <= at) { tbody.insertBefore(tr, row); return; }
    }
    tbody.appendChild(tr);
  }
  function countLive(by, bytes, items) {
    const d = state.downloaders.get(by) || { name: by, bytes: 0, items: 0 };
    d.bytes += bytes;
    d.items += items;
    state.downloaders.set(by, d);
  }
  function addEntries(entries, live) {
    const tbody = $("#log");
    // Oldest first, so among equal times the last received ends up on top.
    const sorted = entries.slice().sort((a, b) => a.at - b.at);
    for (const e of sorted) {
      const key = entryKey(e);
      if (state.seen.has(key)) continue;
      state.seen.add(key);
      const items = e.items || [];
      const size = items.length ? e.bytes / items.length : 0;
      for (const item of items) {
        const tr = document.createElement("tr");
        tr.className = "log-row" + (live ? " fresh" : "");
        tr.dataset.item = item;
        tr.dataset.at = Number(e.at) || 0;
        tr.title = "version " + (e.version || "?") + " · " + (e.ua || "") + " · " + new Date(e.at).toLocaleString();
        for (const [text, cls] of [[e.by, ""], [item, ""], [bytes(size), "num"]]) {
          const td = document.createElement("td");
          td.textContent = text;
          if (cls) td.className = cls;
          tr.appendChild(td);
        }
        insertRow(tbody, tr, Number(e.at) || 0);
      }
      if (live) {
        const done = { at: Number(e.at) || 0, by: e.by, bytes: e.bytes || 0, items: items.length };
        countLive(done.by, done.bytes, done.items);
        state.live.push(done);
        if (state.live.length > LIVE_KEPT) state.live.splice(0, state.live.length - LIVE_KEPT);
        scheduleTable();
      }
    }
    while (tbody.rows.length > LOG_ROWS) tbody.deleteRow(tbody.rows.length - 1);
    if (state.seen.size > 5000) state.seen = new Set(Array.from(state.seen).slice(-1000));
  }

  // Downloaders table: rebuilt at most twice a second, however fast
  // completions arrive, and only the rows shown.
  let tableTimer = null;
  function scheduleTable() {
    if (tableTimer) return;
    tableTimer = setTimeout(() => { tableTimer = null; renderTable(); }, 500);
  }
  function renderTable() {
    const rows = Array.from(state.downloaders.values()).sort((a, b) =>
      (b[state.rankBy] - a[state.rankBy]) || a.name.localeCompare(b.name));
    const shown = state.showAll ? rows : rows.slice(0, TOP_ROWS);
    const frag = document.createDocumentFragment();
    shown.forEach((d, i) => {
      const tr = document.createElement("tr");
      tr.dataset.downloader = d.name;
      tr.title = d.version ? "version " + d.version : "";
      const r = state.recent.get(d.name);
      const now = r && r.items ? F.perMinute(r.items_per_minute) : "";
      for (const [text, cls] of [[i + 1, "num"], [d.name, "nick"], [bytes(d.bytes), "num"], [fmt(d.items), "num"], [now, "num"]]) {
        const td = document.createElement("td");
        if (cls === "nick") {
          // The name links to the downloader's page, as text only.
          const a = document.createElement("a");
          a.className = "nick";
          a.href = "/downloaders/" + encodeURIComponent(text) + "/";
          a.textContent = text;
          td.appendChild(a);
        } else {
          td.textContent = text;
          if (cls) td.className = cls;
        }
        tr.appendChild(td);
      }
      if (r && r.items) tr.cells[4].title = F.perSecond(r.bytes_per_second) + " over the last " + F.duration(state.nowSeconds);
      frag.appendChild(tr);
    });
    $("#downloaders").replaceChildren(frag);
    const more = $("#downloaders-more");
    more.hidden = !(state.showAll && state.more > 0);
    more.textContent = "and " + fmt(state.more) + " more";
  }
  $("#rank-by").addEventListener("change", (ev) => { state.rankBy = ev.target.value; renderTable(); });
  $("#show-all").addEventListener("change", (ev) => { state.showAll = ev.target.checked; renderTable(); });
  if (location.hash === "#show-all") { $("#show-all").checked = true; state.showAll = true; }

  // Stats --------------------------------------------------------------
  async function loadStats() {
    // The server and the browser both reuse a reply for a second or two
    // (Cache-Control), so thousands of open pages cost Redis one read.
    const res = await fetch(base + "/stats.json");
    if (!res.ok) return;
    const s = await res.json();
    const generated = Number(s.generated_at) || 0;
    if (generated && generated < state.statsAt) return; // older than what is shown
    state.statsAt = generated;
    if (s.title) { $("#title").textContent = s.title; document.title = s.title + " · hoard"; }
    applyCounts(s.counts, 0);
    state.downloaders = new Map((s.downloaders || []).map((d) => [d.name, { name: d.name, bytes: d.bytes, items: d.items, version: d.version }]));
    // Completions that came live after these stats were read are not in
    // them yet: count them again, so a cached reply never takes the table
    // back in time.
    state.live = generated ? state.live.filter((e) => e.at > generated) : [];
    for (const e of state.live) countLive(e.by, e.bytes, e.items);
    state.more = Math.max(0, (Number(s.downloaders_total) || 0) - (s.downloaders || []).length);
    renderPace(s);
    renderTable();
    $("#stat-irsr").textContent = s.last_hour && s.last_hour.requests ? pct(s.last_hour.irsr) : pct(s.irsr);
    $("#stat-reclaim-rate").textContent = pct(s.reclaim_rate);
    $("#stat-reclaim-serve-rate").textContent = pct(s.reclaim_serve_rate);
    $("#stat-rtt").textContent = s.rtt || "–";
    $("#stat-item-fail-rate").textContent = pct(s.item_fail_rate);
    $("#stat-filter-rate").textContent = pct(s.filter_rate);
    const hourly = s.hourly || [];
    $("#stat-items-hour").textContent = hourly.length ? fmt(hourly[hourly.length - 1].items_done) : "–";
    $("#stat-bytes").textContent = bytes((s.counters || {}).bytes_done);
  }

  // Pace, ETAs and what is held back ------------------------------------
  const QUEUE_NAMES = {
    "todo:scored": "scored (highest score first)", "todo": "to do", "todo:backfeed": "backfeed",
    "todo:secondary": "secondary", "todo:redo": "redo (released items)",
  };
  // heldText says in words why a set of waiting items is not handed out.
  function heldText(h) {
    const n = fmt(h.items) + (h.items === 1 ? " item" : " items");
    switch (h.kind) {
      case "paused":
        return n + " wait because the project is paused: warriors get nothing until an operator resumes it.";
      case "claims_limit":
        return n + " wait because the project's claims limit (" + fmt(h.burst) + " items out at once) is reached: new items go out as claims come back.";
      case "reserved":
        return n + " are reserved for named downloaders: only they are given them.";
      case "limit_group":
        if (!(h.rate_per_minute > 0)) {
          return n + " belong to limit group “" + h.name + "”, which is paused (rate 0): none are handed out.";
        }
        return n + " belong to limit group “" + h.name + "”, handed out at most " + F.perMinute(h.rate_per_minute) +
          (h.burst > 1 ? " (up to " + fmt(h.burst) + " at once)" : "") + ", so they need at least " + F.duration(h.eta_seconds) +
          ". When only these are left, a warrior asking between two of them gets “no item” (404) and tries again later.";
    }
    return n + " are held back (" + h.kind + ").";
  }
  function renderPace(s) {
    const r = s.rates;
    if (!r) return;
    state.nowSeconds = r.now ? r.now.seconds : 0;
    state.recent = new Map((r.downloaders || []).map((d) => [d.name, d]));
    $("#rate-items").textContent = F.perMinute(r.now && r.now.items_per_minute);
    $("#rate-bytes").textContent = F.perSecond(r.now && r.now.bytes_per_second);
    const queues = r.queues || [];
    const waiting = queues.reduce((sum, q) => sum + (q.items || 0), 0);
    const eta = $("#eta-all"), basis = $("#eta-basis");
    if (!waiting) {
      eta.textContent = "nothing waiting";
      basis.textContent = "no items are queued";
    } else if (r.eta_seconds === null || r.eta_seconds === undefined) {
      eta.textContent = "–";
      basis.textContent = "nothing was done in the last hour, so there is no pace to go by";
    } else {
      eta.textContent = F.duration(r.eta_seconds);
      const hour = r.recent || {};
      basis.textContent = "at the pace of the last " + F.duration(hour.seconds) + " (" + F.perMinute(hour.items_per_minute) + ")" +
        ((r.held_back || []).some((h) => h.kind === "limit_group" && h.eta_seconds) ? ", and no sooner than the limit groups allow" : "");
    }
    const rows = document.createDocumentFragment();
    for (const q of queues) {
      if (!q.items) continue;
      const tr = document.createElement("tr");
      tr.dataset.queue = q.queue;
      for (const [text, cls] of [[QUEUE_NAMES[q.queue] || q.queue, ""], [fmt(q.items), "num"], [q.eta_seconds === null ? "–" : F.duration(q.eta_seconds), "num"]]) {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.appendChild(td);
      }
      rows.appendChild(tr);
    }
    if (!rows.childNodes.length) {
      const tr = document.createElement("tr");
      const td = document.createElement("td");
      td.colSpan = 3;
      td.className = "muted";
      td.textContent = "No items are waiting.";
      tr.appendChild(td);
      rows.appendChild(tr);
    }
    $("#queue-eta").replaceChildren(rows);
    const held = r.held_back || [];
    $("#held").hidden = held.length === 0;
    $("#held-list").replaceChildren(...held.map((h) => {
      const li = document.createElement("li");
      li.dataset.kind = h.kind;
      li.textContent = heldText(h);
      return li;
    }));
  }

  // Charts -------------------------------------------------------------
  const COLORS = ["#4fa3ff", "#3fb950", "#e3b341", "#f778ba", "#a371f7", "#ff7b72", "#79c0ff", "#56d364", "#d29922", "#db61a2"];
  function canvas2d(id) {
    const c = $(id), ratio = window.devicePixelRatio || 1;
    const w = c.clientWidth || 300, h = c.clientHeight || 180;
    c.width = w * ratio; c.height = h * ratio;
    const g = c.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    return { g, w, h };
  }
  // ago writes a time span back from now: "5 min", "7 h", "12 d".
  function ago(ms) {
    if (ms < 2 * 3600e3) return Math.round(ms / 60e3) + " min ago";
    if (ms < 2 * 86400e3) return Math.round(ms / 3600e3) + " h ago";
    return Math.round(ms / 86400e3) + " d ago";
  }
  // drawSeries draws one chart. Each series' values are one per opts.step
  // ms, the last one now. The chart starts at the first point with data,
  // so a young project's chart fits what it has instead of a spike at the
  // right edge of an empty month; the x axis gets a few ticks, and hovering
  // shows the value under the pointer.
  function drawSeries(id, series, opts) {
    const { g, w, h } = canvas2d(id);
    const pad = { l: 56, r: 8, t: 8, b: 18 };
    let n = 0;
    for (const s of series) n = Math.max(n, s.values.length);
    let first = n;
    for (const s of series) {
      const off = n - s.values.length;
      const i = s.values.findIndex((v) => v > 0);
      if (i >= 0) first = Math.min(first, off + i);
    }
    first = Math.max(0, Math.min(first, n - 2));
    const shown = series.map((s) => ({ ...s, values: s.values.slice(Math.max(0, first - (n - s.values.length))) }));
    const count = Math.max(1, n - first);
    let max = 0;
    for (const s of shown) for (const v of s.values) max = Math.max(max, v);
    if (max === 0) max = 1;
    g.strokeStyle = "#2d333b"; g.fillStyle = "#8b949e"; g.font = "11px system-ui";
    for (let i = 0; i <= 2; i++) {
      const y = pad.t + (h - pad.t - pad.b) * (1 - i / 2);
      g.beginPath(); g.moveTo(pad.l, y); g.lineTo(w - pad.r, y); g.stroke();
      g.fillText(opts.label(max * i / 2), 4, y + 4);
    }
    const x = (i) => pad.l + (w - pad.l - pad.r) * (count === 1 ? 1 : i / (count - 1));
    // Up to three ticks back from now, never crowding each other or "now".
    let lastX = -Infinity;
    for (const i of count > 1 ? [0, Math.round((count - 1) / 3), Math.round(2 * (count - 1) / 3)] : []) {
      const at = x(i);
      if (i >= count - 1 || at - lastX < 90 || at > w - pad.r - 100) continue;
      g.fillText(ago((count - 1 - i) * opts.step), at, h - 4);
      lastX = at;
    }
    g.fillText("now", w - pad.r - 22, h - 4);
    shown.forEach((s, k) => {
      const m = s.values.length;
      if (m === 0) return;
      const off = count - m;
      const y = (v) => pad.t + (h - pad.t - pad.b) * (1 - v / max);
      g.strokeStyle = g.fillStyle = s.color || COLORS[k % COLORS.length];
      if (opts.bars) {
        const bw = Math.max(1, (w - pad.l - pad.r) / count - 1);
        s.values.forEach((v, i) => g.fillRect(x(off + i) - bw / 2, y(v), bw, y(0) - y(v)));
      } else {
        g.lineWidth = 1.5; g.beginPath();
        s.values.forEach((v, i) => (i ? g.lineTo(x(off + i), y(v)) : g.moveTo(x(off + i), y(v))));
        g.stroke();
      }
    });
    const c = $(id);
    c.onmousemove = (ev) => {
      const r = c.getBoundingClientRect();
      const i = count === 1 ? 0 : Math.round(((ev.clientX - r.left - pad.l) / (w - pad.l - pad.r)) * (count - 1));
      if (i < 0 || i >= count) { c.title = ""; return; }
      const parts = shown.map((s) => {
        const v = s.values[i - (count - s.values.length)];
        return v === undefined ? null : (s.name ? s.name + ": " : "") + opts.label(v);
      }).filter(Boolean);
      c.title = ago((count - 1 - i) * opts.step) + " · " + parts.join(", ");
    };
  }
  async function loadCharts() {
    const res = await fetch(base + "/charts.json");
    if (!res.ok) return;
    const c = await res.json();
    const hours = c.hours || [];
    // Items done over time: the running total, counted back from now.
    const cumulative = new Array(hours.length);
    let total = c.items_done_total || 0;
    for (let i = hours.length - 1; i >= 0; i--) { cumulative[i] = total; total -= hours[i].items; }
    drawSeries("#chart-items", [{ values: cumulative }], { label: fmt, step: 3600e3 });
    drawSeries("#chart-hourly", [{ values: hours.map((p) => p.items) }], { label: fmt, step: 3600e3, bars: true });
    drawSeries("#chart-bytes", [{ values: (c.minutes || []).map((p) => p.bytes / 60) }], { label: (v) => bytes(v) + "/s", step: 60e3 });
    const top = (c.downloaders || []).map((d, k) => {
      let run = 0;
      return { name: d.name, color: COLORS[k % COLORS.length], values: d.bytes.map((b) => (run += b)) };
    });
    drawSeries("#chart-downloaders", top, { label: bytes, step: 3600e3 });
    $("#legend").replaceChildren(...top.map((s) => {
      const span = document.createElement("span");
      const dot = document.createElement("i");
      dot.style.background = s.color;
      span.append(dot, s.name);
      return span;
    }));
  }

  // After live activity, refresh the stats and charts soon (at most every
  // few seconds), so the page never contradicts its own live log for long.
  let refreshTimer = null, lastRefresh = 0;
  function scheduleRefresh() {
    if (refreshTimer) return;
    const wait = Math.max(1000, 5000 - (Date.now() - lastRefresh));
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      lastRefresh = Date.now();
      loadStats().catch(() => {});
      loadCharts().catch(() => {});
    }, wait);
  }

  // Live updates -------------------------------------------------------
  let delay = 1000;
  function connect() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + base + "/ws");
    ws.onopen = () => { delay = 1000; $("#status").textContent = "live"; $("#status").classList.add("live"); };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      // A snapshot restarts the clock: after a reconnect it may come from
      // another frontend, whose clock may be behind the last one's.
      if (msg.type === "snapshot") state.countsAt = 0;
      applyCounts(msg.counts, msg.at || 0);
      // A snapshot's entries are history (already in the leaderboard);
      // an update's are new.
      addEntries(msg.log || [], msg.type === "update");
      if (msg.type === "update" && (msg.log || []).length) scheduleRefresh();
    };
    ws.onclose = () => {
      $("#status").textContent = "reconnecting";
      $("#status").classList.remove("live");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }

  loadStats().catch(() => {}).finally(connect);
  loadCharts().catch(() => {});
  setInterval(() => loadStats().catch(() => {}), 30000);
  setInterval(() => loadCharts().catch(() => {}), 60000);
  window.addEventListener("resize", () => loadCharts().catch(() => {}));
})();
