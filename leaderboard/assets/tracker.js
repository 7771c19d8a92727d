// The tracker page: each plugin's state, its totals, and its labelled
// series as tables (the reaper's uploads by state and notice, its steps,
// …), from /tracker.json, read again every 10 s. Everything is built with
// DOM calls and textContent: plugin names, labels and help come from the
// plugins and are never parsed as HTML.
'use strict';

const fmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 });

// Titles for the series people look for; others use the metric's label.
const TITLES = {
  reaper_torrents: 'Unseeded reaper: uploads by state and notice',
  reaper_steps: 'Unseeded reaper: steps done',
};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function renderPlugin(plugin) {
  const section = el('section', { class: 'panel tracker-plugin', 'data-plugin': plugin.name });
  const restarts = plugin.restarts ? ` · ${plugin.restarts} restarts` : '';
  section.append(el('h2', {}, plugin.name, el('span', { class: 'muted small' }, `${plugin.state}${restarts}`)));
  const totals = plugin.metrics.filter((m) => !m.labels);
  if (totals.length) {
    const dl = el('dl', { class: 'plugin-metrics' });
    for (const m of totals) {
      dl.append(el('div', {}, el('dt', { title: m.help || '' }, m.label), el('dd', {}, fmt.format(m.value))));
    }
    section.append(dl);
  }
  // Labelled series, one table per metric: a column per label, then the value.
  const families = new Map();
  for (const m of plugin.metrics.filter((m) => m.labels)) {
    if (!families.has(m.name)) families.set(m.name, []);
    families.get(m.name).push(m);
  }
  for (const [name, series] of families) {
    const keys = [...new Set(series.flatMap((m) => Object.keys(m.labels)))].sort();
    const table = el('table', { class: 'tracker-series', 'data-metric': name });
    table.append(el('caption', { title: series[0].help || '' }, TITLES[name] || series[0].label));
    table.append(el('thead', {}, el('tr', {}, ...keys.map((k) => el('th', {}, k)), el('th', { class: 'num' }, 'count'))));
    const body = el('tbody');
    for (const m of series) {
      body.append(el('tr', {}, ...keys.map((k) => el('td', {}, m.labels[k] ?? '')), el('td', { class: 'num' }, fmt.format(m.value))));
    }
    table.append(body);
    section.append(table);
  }
  return section;
}

// A table of rows; the last column is a count.
function table(name, caption, headers, rows) {
  const t = el('table', { class: 'tracker-series', 'data-view': name });
  t.append(el('caption', {}, caption));
  t.append(el('thead', {}, el('tr', {}, ...headers.map((h, i) => el('th', i === headers.length - 1 ? { class: 'num' } : {}, h)))));
  const body = el('tbody');
  for (const row of rows) {
    body.append(el('tr', {}, ...row.map((v, i) => el('td', i === row.length - 1 ? { class: 'num' } : {},
      i === row.length - 1 ? fmt.format(v) : v))));
  }
  t.append(body);
  return t;
}

// Seed 002's views (/tracker/bittorrent.json): unique users per month and
// per country, and the torrents by score when the operator made them
// public. Absent (no BitTorrent views on this hoard): nothing.
async function renderViews() {
  const res = await fetch('/tracker/bittorrent.json', { cache: 'no-store' });
  // No BitTorrent plugin here (404), or it is restarting: the rest of
  // the page still shows.
  if (!res.ok) return null;
  const v = await res.json();
  const section = el('section', { class: 'panel tracker-plugin', 'data-views': 'bittorrent' });
  section.append(el('h2', {}, 'Swarm users', el('span', { class: 'muted small' },
    `${fmt.format(v.users)} unique users (each IP once per 30 days)`)));
  section.append(table('months', 'Unique users per month', ['month', 'users'],
    v.users_by_month.map((m) => [m.month, m.users])));
  section.append(table('countries', 'Users per country', ['country', 'users'],
    v.countries.map((c) => [c.country, c.users])));
  if (v.top_torrents_shown) {
    section.append(table('top', 'Torrents by score', ['info-hash', 'score'],
      v.top_torrents.map((t) => [t.info_hash, t.score])));
  }
  return section;
}

async function refresh() {
  const status = document.getElementById('status');
  try {
    const res = await fetch('/tracker.json', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const list = await res.json();
    const views = await renderViews();
    const main = document.getElementById('plugins');
    const sections = list.map(renderPlugin);
    if (views) sections.push(views);
    main.replaceChildren(...(sections.length ? sections
      : [el('p', { class: 'muted' }, 'No plugins run on this frontend.')]));
    status.textContent = 'updated ' + new Date().toLocaleTimeString();
    status.classList.add('live');
  } catch (err) {
    status.textContent = 'offline';
    status.classList.remove('live');
  }
}

refresh();
setInterval(refresh, 10000);
