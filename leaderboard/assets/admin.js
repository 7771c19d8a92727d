// hoard's web admin: one page over the admin API (/api/v1), the very calls
// the CLI makes. The session cookie is HttpOnly: this script never holds a
// token or the cookie, only the session's CSRF value, which it sends with
// every change. Everything the API returns is put in the page as text
// (textContent), never as HTML, whatever an item, a nickname or a reason
// holds.
'use strict';

const state = { account: '', roles: [], csrf: '', pluginPages: null };

// el builds an element: attrs are set as properties or attributes, and
// children are nodes or strings (always text nodes).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k in node && typeof v !== 'string') node[k] = v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function flash(text, error) {
  const f = document.getElementById('flash');
  f.textContent = text;
  f.className = error ? 'flash error' : 'flash';
  f.hidden = !text;
}

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

// api makes one admin call; a change carries the session's CSRF value.
async function api(method, path, body) {
  const headers = {};
  if (method !== 'GET') headers['X-Hoard-CSRF'] = state.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path.startsWith('/admin/') ? path : '/api/v1' + path, {
    method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  const text = await resp.text();
  try { data = text ? JSON.parse(text) : null; } catch { data = { error: text }; }
  if (!resp.ok) {
    if (resp.status === 401 && path !== '/admin/session') showSignIn('Your session has ended: sign in again.');
    throw new APIError(resp.status, data);
  }
  return data;
}

// act runs a change and reports it, or the API's refusal, in the flash.
async function act(what, fn) {
  try {
    const msg = await fn();
    flash(msg || what + ': done');
    return true;
  } catch (err) {
    flash(what + ': ' + err.message + (err.status ? ` (HTTP ${err.status})` : ''), true);
    return false;
  }
}

const isAdmin = () => state.roles.includes('admin');
const readsAll = () => isAdmin() || state.roles.includes('viewer:*');
const canWrite = (slug) => isAdmin() || state.roles.includes('project-admin:' + slug);

function showSignIn(message) {
  state.account = ''; state.csrf = ''; state.roles = []; state.pluginPages = null;
  document.getElementById('signin').hidden = false;
  document.getElementById('nav').hidden = true;
  document.getElementById('who').hidden = true;
  document.getElementById('signout').hidden = true;
  document.getElementById('view').replaceChildren();
  flash(message || '', Boolean(message));
}

function signedIn(info) {
  state.account = info.account; state.roles = info.roles || []; state.csrf = info.csrf;
  document.getElementById('signin').hidden = true;
  document.getElementById('nav').hidden = false;
  document.getElementById('nav-accounts').hidden = !isAdmin();
  document.getElementById('nav-log').hidden = !readsAll();
  const who = document.getElementById('who');
  who.textContent = info.account + ' · ' + (state.roles.join(', ') || 'no role');
  who.hidden = false;
  document.getElementById('signout').hidden = false;
  document.getElementById('nav-plugins').hidden = true;
  loadPluginPages().then((list) => { document.getElementById('nav-plugins').hidden = !list.length; }).catch(() => {});
  route();
}

document.getElementById('signin-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('token');
  try {
    const info = await api('POST', '/admin/session', { token: input.value });
    input.value = '';
    flash('');
    signedIn(info);
  } catch (err) {
    input.value = '';
    flash('Sign-in refused: ' + err.message, true);
  }
});

document.getElementById('signout').addEventListener('click', async () => {
  try { await api('DELETE', '/admin/session'); } catch { /* signed out either way */ }
  location.hash = '#/';
  showSignIn('Signed out.');
  document.getElementById('flash').className = 'flash';
});

window.addEventListener('hashchange', () => { if (state.account) route(); });

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const view = document.getElementById('view');
  view.replaceChildren();
  const m = hash.match(/^\/p\/([^/]+)$/);
  if (m) return projectView(view, decodeURIComponent(m[1]));
  if (hash === '/log') return logView(view, '/log');
  if (hash === '/accounts') return accountsView(view);
  if (hash === '/tokens') return tokensView(view);
  if (hash === '/plugins') return pluginsView(view);
  const pm = hash.match(/^\/x\/([^/]+)\/([^/]+)$/);
  if (pm) return pluginPageView(view, decodeURIComponent(pm[1]), decodeURIComponent(pm[2]));
  return projectsView(view);
}

// table builds a table; body is a tbody, or the rows to put in one.
function table(cls, headers, body) {
  return el('table', { class: cls },
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    body instanceof HTMLTableSectionElement ? body : el('tbody', {}, body));
}

function fmtTime(t) { return t ? new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : ''; }

// ---- projects -------------------------------------------------------

async function projectsView(view) {
  const panel = el('section', { class: 'panel' }, el('h2', {}, 'Projects'));
  view.append(panel);
  try {
    const data = await api('GET', '/projects');
    const list = el('ul', { class: 'projects' });
    for (const slug of data.projects) {
      list.append(el('li', {}, el('a', { class: 'project', href: '#/p/' + encodeURIComponent(slug) }, slug),
        el('span', { class: 'muted small' }, canWrite(slug) ? 'you run it' : 'read-only')));
    }
    if (!data.projects.length) list.append(el('li', { class: 'muted' }, 'No project you may see.'));
    panel.append(list);
  } catch (err) { panel.append(el('p', { class: 'flash error' }, err.message)); }
  if (isAdmin()) {
    const slug = el('input', { id: 'new-slug', type: 'text', placeholder: 'slug', required: true });
    panel.append(el('form', { class: 'row', onsubmit: async (ev) => {
      ev.preventDefault();
      if (await act('create ' + slug.value, async () => { await api('POST', '/projects/' + encodeURIComponent(slug.value)); })) {
        location.hash = '#/p/' + encodeURIComponent(slug.value);
      }
    } }, el('div', {}, el('label', { for: 'new-slug' }, 'New project'), slug), el('button', { type: 'submit' }, 'Create')));
  }
}

// What each setting means, shown beside its value.
const SETTINGS = [
  ['title', 'text', 'Shown on the leaderboard and in projects.json.'],
  ['paused', 'bool', 'A paused project hands out no items (404) and is left out of projects.json.'],
  ['min_version', 'text', 'Oldest pipeline version served; older ones get 455 (compared as versions).'],
  ['rate_per_minute', 'number', 'Item requests per minute for the whole project (0 = no limit).'],
  ['rate_burst', 'number', 'Requests allowed back to back under that rate.'],
  ['downloader_rate_per_minute', 'number', 'Item requests per minute per downloader (0 = off).'],
  ['downloader_rate_burst', 'number', 'Burst of that per-downloader limit.'],
  ['ip_rate_per_minute', 'number', 'Item requests per minute per client IP (0 = off).'],
  ['ip_rate_burst', 'number', 'Burst of that per-IP limit.'],
  ['ignore_global_blocks', 'bool', 'Serve nicknames and IPs blocked server-wide.'],
  ['downloader_budget', 'number', 'Most items one downloader may have out at once (0 = off).'],
  ['claims_limit', 'number', 'Most items out in the whole project (0 = off); past it reclaims are served first.'],
  ['reclaim_enabled', 'bool', 'Hand out again items whose claim is older than the reclaim TTL.'],
  ['reclaim_ttl', 'text', 'How long a claim lasts before it may be reclaimed (e.g. 6h).'],
  ['max_multi', 'number', 'Largest N of /multi=N/request.'],
  ['log_length', 'number', 'Recent completions kept for the leaderboard.'],
  ['done_mode', 'text', 'keep (every done item in Redis), count (counted, discarded) or archive (to files).'],
  ['recent_done', 'number', 'Recent completions count and archive keep to recognise a repeated done.'],
  ['offload_above', 'number', 'Items a queue keeps in Redis before its tail moves to files on disk (0 = never).'],
  ['offload_segment', 'number', 'Items per offloaded segment file.'],
  ['bloom_capacity', 'number', 'Items per generation of the backfeed filter.'],
  ['bloom_fp_rate', 'number', 'False-positive rate of the backfeed filter.'],
  ['bloom_words', 'number', 'Words per item in new filter generations, 2-4 (fewer: less Redis CPU, more memory); 0 = automatic.'],
  ['event_log', 'number', 'Entries of the event stream plugins read (0 = off).'],
  ['max_claims', 'number', 'Times an item may be claimed without a done before it goes to the failed items (0 = reclaimed forever).'],
  ['fail_report_to', 'text', 'Where an item its claimant reports failed goes: failed, or redo (served again until max_claims).'],
  ['upload_targets', 'json', 'Where warriors upload (:downloader is replaced by the nickname).'],
  ['extra', 'json', 'Extra keys sent with every item.'],
  ['limit_groups', 'json', 'Rate-limited item types and patterns (hoard limits set).'],
];

function valueText(v) {
  if (v === undefined || v === null) return '';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

async function projectView(view, slug) {
  const writable = canWrite(slug);
  view.append(el('h2', {}, slug, writable ? null : el('span', { class: 'badge' }, 'read-only')));
  let data;
  try { data = await api('GET', '/projects/' + encodeURIComponent(slug)); } catch (err) {
    view.append(el('p', { class: 'flash error' }, err.message)); return;
  }
  const p = data.project;
  const reload = () => route();

  // Actions.
  const actions = el('section', { class: 'panel' }, el('h2', {}, 'Actions'));
  actions.append(el('div', { class: 'row' },
    el('button', { id: 'pause', type: 'button', onclick: () => act(p.paused ? 'resume' : 'pause', async () => {
      await api('PATCH', '/projects/' + encodeURIComponent(slug), { paused: !p.paused }); reload();
      return p.paused ? 'resumed ' + slug : 'paused ' + slug;
    }) }, p.paused ? 'Resume' : 'Pause'),
    el('button', { id: 'rotate', type: 'button', onclick: () => act('rotate the backfeed secret', async () => {
      const bytes = crypto.getRandomValues(new Uint8Array(24));
      const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_';
      const secret = Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
      await api('PATCH', '/projects/' + encodeURIComponent(slug), { backfeed_secret: secret });
      reload();
      return 'backfeed secret rotated; grab scripts need the new one: read it with `hoard project show ' + slug + '` (it is never shown here)';
    }) }, 'Rotate backfeed secret'),
  ));
  const confirmInput = el('input', { id: 'delete-confirm', type: 'text', placeholder: 'type ' + slug + ' to confirm' });
  actions.append(el('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    if (confirmInput.value !== slug) { flash('delete: type the project name to confirm', true); return; }
    if (await act('delete ' + slug, async () => {
      await api('DELETE', '/projects/' + encodeURIComponent(slug) + '?confirm=' + encodeURIComponent(confirmInput.value));
      return 'deleted ' + slug;
    })) location.hash = '#/';
  } }, el('div', {}, el('label', { for: 'delete-confirm' }, 'Delete the project (queues, claims, done items, stats and files)'), confirmInput),
  el('button', { type: 'submit', class: 'danger', id: 'delete' }, 'Delete')));
  view.append(actions);

  // Counts and queues.
  const queues = el('section', { class: 'panel', id: 'queues' }, el('h2', {}, 'Queues'));
  const counts = data.counts || {};
  queues.append(el('div', { class: 'counts' }, Object.entries(counts).filter(([, v]) => typeof v === 'number').map(([k, v]) =>
    el('div', { class: 'count', 'data-count': k }, el('span', { class: 'label' }, k), el('span', { class: 'value' }, v.toLocaleString('en-US'))))));
  const qnames = ['todo', 'backfeed', 'secondary', 'redo'];
  const qselect = (id) => el('select', { id }, qnames.map((q) => el('option', { value: q }, q)));
  const addQueue = qselect('add-queue');
  const paste = el('textarea', { id: 'add-items', placeholder: 'one item per line' });
  const file = el('input', { id: 'add-file', type: 'file', accept: '.txt,text/plain' });
  const progress = el('span', { id: 'add-progress', class: 'muted' });
  const addLines = async (text) => {
    const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l);
    let queued = 0, skipped = 0, already = 0, rejected = 0;
    for (let i = 0; i < lines.length; i += 10000) {
      const r = await api('POST', '/projects/' + encodeURIComponent(slug) + '/items', { queue: addQueue.value, items: lines.slice(i, i + 10000) });
      queued += r.queued; skipped += r.skipped; already += r.already_queued; rejected += r.rejected;
      progress.textContent = `${Math.min(i + 10000, lines.length)} of ${lines.length} sent`;
    }
    return `queued ${queued} into ${addQueue.value}; ${already} already queued, ${skipped} already out or done, ${rejected} rejected`;
  };
  queues.append(el('form', { onsubmit: async (ev) => {
    ev.preventDefault();
    if (await act('add items', async () => {
      const text = file.files.length ? await file.files[0].text() : paste.value;
      return addLines(text);
    })) { paste.value = ''; setTimeout(reload, 0); }
  } }, el('label', { for: 'add-items' }, 'Add items (paste, or choose a file)'), paste,
  el('div', { class: 'row' }, el('div', {}, el('label', { for: 'add-queue' }, 'into'), addQueue), file,
    el('button', { type: 'submit', id: 'add' }, 'Add'), progress)));

  const from = qselect('move-from'), to = qselect('move-to');
  to.value = 'secondary';
  const kind = el('select', { id: 'move-kind' }, ['glob', 'regex', 'type'].map((k) => el('option', { value: k }, k)));
  const pattern = el('input', { id: 'move-pattern', type: 'text', placeholder: 'user:*' });
  const count = el('input', { id: 'move-count', type: 'number', min: '0', placeholder: 'all' });
  queues.append(el('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    const req = { from: from.value, to: to.value };
    if (pattern.value) req[kind.value] = pattern.value;
    if (count.value) req.count = Number(count.value);
    const what = `move ${pattern.value ? kind.value + ' ' + pattern.value : 'every item'} from ${from.value} to ${to.value}`;
    // The preview is the same call with dry_run: it counts, moves nothing.
    let preview;
    try {
      preview = await api('POST', '/projects/' + encodeURIComponent(slug) + '/queues/move', { ...req, dry_run: true });
    } catch (err) { flash(what + ': ' + err.message + ` (HTTP ${err.status})`, true); return; }
    if (!window.confirm(`${what}: ${preview.moved} items (of ${preview.scanned} read). Move them?`)) { flash('move cancelled'); return; }
    if (await act(what, async () => {
      const r = await api('POST', '/projects/' + encodeURIComponent(slug) + '/queues/move', req);
      return `moved ${r.moved} items from ${from.value} to ${to.value}`;
    })) setTimeout(reload, 0);
  } }, el('div', {}, el('label', { for: 'move-from' }, 'Move from'), from), el('div', {}, el('label', { for: 'move-to' }, 'to'), to),
  el('div', {}, el('label', { for: 'move-kind' }, 'matching'), kind), el('div', {}, el('label', { for: 'move-pattern' }, 'pattern'), pattern),
  el('div', {}, el('label', { for: 'move-count' }, 'at most'), count), el('button', { type: 'submit', id: 'move' }, 'Move')));
  queues.append(el('p', { class: 'small' }, 'Export: ', qnames.map((q) => [el('a', { class: 'link', download: `${slug}-${q}.txt`,
    href: '/api/v1/projects/' + encodeURIComponent(slug) + '/queues/' + q + '/export' }, q), ' ']),
  el('a', { class: 'link', download: `${slug}-claims.txt`, href: '/api/v1/projects/' + encodeURIComponent(slug) + '/claims/export' }, 'claims')));
  view.append(queues);

  // Claims.
  const claims = el('section', { class: 'panel', id: 'claims' }, el('h2', {}, 'Claims'));
  const downloader = el('input', { id: 'claims-downloader', type: 'text', placeholder: 'downloader' });
  const older = el('input', { id: 'claims-older', type: 'text', placeholder: 'older than, e.g. 6h' });
  const claimsBody = el('tbody');
  const loadClaims = async () => {
    const q = new URLSearchParams({ limit: '200' });
    if (downloader.value) q.set('downloader', downloader.value);
    if (older.value) q.set('older_than', older.value);
    try {
      const r = await api('GET', '/projects/' + encodeURIComponent(slug) + '/claims?' + q);
      claimsBody.replaceChildren(...r.claims.map((c) => el('tr', {},
        el('td', {}, el('input', { type: 'checkbox', value: c.item, 'aria-label': 'select' })),
        el('td', { class: 'wrap item' }, c.item), el('td', { class: 'wrap downloader' }, c.downloader), el('td', {}, fmtTime(c.claimed_at)))));
      if (!r.claims.length) claimsBody.append(el('tr', {}, el('td', { colspan: '4', class: 'muted' }, 'No claims.')));
    } catch (err) { flash('claims: ' + err.message, true); }
  };
  claims.append(el('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); loadClaims(); } },
    el('div', {}, el('label', { for: 'claims-downloader' }, 'Downloader'), downloader),
    el('div', {}, el('label', { for: 'claims-older' }, 'Older than'), older),
    el('button', { type: 'submit', id: 'claims-filter' }, 'Filter'),
    el('button', { type: 'button', id: 'claims-release', onclick: async () => {
      const items = [...claimsBody.querySelectorAll('input:checked')].map((c) => c.value);
      if (!items.length) { flash('release: select claims first', true); return; }
      if (await act('release', async () => {
        const r = await api('POST', '/projects/' + encodeURIComponent(slug) + '/claims/release', { items });
        return `released ${r.released} claims`;
      })) loadClaims();
    } }, 'Release selected')));
  claims.append(table('claims', ['', 'Item', 'Downloader', 'Claimed'], claimsBody));
  view.append(claims);
  loadClaims();

  // Failed items: claimed max_claims times without a done, or reported
  // failed by their claimant (docs/failed-items.md).
  const failed = el('section', { class: 'panel', id: 'failed' }, el('h2', {}, 'Failed items'),
    el('p', { class: 'muted small' }, 'Items claimed max_claims times without a done, or reported failed by their claimant. Requeue them (their claim count starts again) or delete them.'));
  const failedBody = el('tbody');
  const failedPath = '/projects/' + encodeURIComponent(slug) + '/failed';
  const loadFailed = async () => {
    try {
      const r = await api('GET', failedPath + '?limit=200');
      failedBody.replaceChildren(...r.failed.map((f) => el('tr', {},
        el('td', {}, el('input', { type: 'checkbox', value: f.item, 'aria-label': 'select' })),
        el('td', { class: 'wrap item' }, f.item), el('td', { 'data-label': 'Claims' }, String(f.claims)),
        el('td', { class: 'at', 'data-label': 'Failed' }, fmtTime(f.at)),
        el('td', { class: 'wrap reason', 'data-label': 'Why' }, f.message ? f.reason + ': ' + f.message : f.reason),
        el('td', { class: 'wrap history', 'data-label': 'Claimants' }, (f.history || []).map((h) => h.by + ' (' + h.ended + ')').join(', ')))));
      if (!r.failed.length) failedBody.append(el('tr', {}, el('td', { colspan: '6', class: 'muted' }, 'No failed items.')));
    } catch (err) { flash('failed items: ' + err.message, true); }
  };
  const requeueTo = el('select', { id: 'failed-queue' }, ['todo', 'backfeed', 'secondary', 'redo'].map((q) => el('option', { value: q }, q)));
  const selectedFailed = () => [...failedBody.querySelectorAll('input:checked')].map((c) => c.value);
  const failedAction = (verb, all) => async () => {
    const items = all ? [] : selectedFailed();
    if (!all && !items.length) { flash(verb + ': select failed items first', true); return; }
    if (all && !confirm(verb + ' every failed item?')) return;
    const body = all ? { all: true } : { items };
    if (verb === 'requeue') body.queue = requeueTo.value;
    if (await act(verb, async () => {
      const r = await api('POST', failedPath + '/' + verb, body);
      return `${verb === 'requeue' ? 'requeued' : 'deleted'} ${r.moved} failed items` + (r.not_failed ? ` (${r.not_failed} were no longer failed)` : '');
    })) loadFailed();
  };
  failed.append(el('div', { class: 'row' },
    el('div', {}, el('label', { for: 'failed-queue' }, 'Requeue to'), requeueTo),
    el('button', { type: 'button', id: 'failed-requeue', onclick: failedAction('requeue', false) }, 'Requeue selected'),
    el('button', { type: 'button', id: 'failed-requeue-all', onclick: failedAction('requeue', true) }, 'Requeue all'),
    el('button', { type: 'button', class: 'danger', id: 'failed-delete', onclick: failedAction('delete', false) }, 'Delete selected'),
    el('button', { type: 'button', id: 'failed-refresh', onclick: loadFailed }, 'Refresh')));
  failed.append(table('failed', ['', 'Item', 'Claims', 'Failed', 'Why', 'Claimants'], failedBody));
  failed.append(el('p', { class: 'small' }, 'Export: ', el('a', { class: 'link', download: `${slug}-failed.jsonl`, href: '/api/v1' + failedPath + '/export' }, 'failed items')));
  view.append(failed);
  loadFailed();

  // Limit groups: the whole list as JSON, saved as one PUT (which also
  // re-routes queued items when a matcher changed).
  const groups = el('section', { class: 'panel', id: 'limit-groups' }, el('h2', {}, 'Limit groups'),
    el('p', { class: 'muted small' }, 'Each group holds back items of a type, glob or regex to rate_per_minute (with burst); for example [{"name":"users","type":"user","rate_per_minute":60,"burst":5}]. [] removes them all.'));
  const groupsText = el('textarea', { id: 'limit-groups-json', spellcheck: 'false' });
  groupsText.value = JSON.stringify(p.limit_groups || [], null, 1);
  groups.append(el('form', { onsubmit: async (ev) => {
    ev.preventDefault();
    let list;
    try { list = JSON.parse(groupsText.value || '[]'); } catch (err) { flash('limit groups: not JSON: ' + err.message, true); return; }
    if (await act('limit groups', async () => {
      const r = await api('PUT', '/projects/' + encodeURIComponent(slug) + '/limit-groups', { groups: list });
      return `limit groups saved (${(r.groups || []).length}); ${(r.rerouted && r.rerouted.moved) || 0} items re-routed`;
    })) setTimeout(reload, 0);
  } }, groupsText, el('button', { type: 'submit', id: 'save-limit-groups' }, 'Save limit groups')));
  view.append(groups);

  // Blocks in this project.
  const blocks = el('section', { class: 'panel', id: 'blocks' }, el('h2', {}, 'Blocks'));
  const blocksBody = el('tbody');
  const loadBlocks = async () => {
    try {
      const r = await api('GET', '/projects/' + encodeURIComponent(slug) + '/blocks');
      const entries = Object.entries(r.blocks || {});
      blocksBody.replaceChildren(...entries.map(([who, b]) => el('tr', {},
        el('td', { class: 'wrap who' }, who), el('td', { class: 'wrap reason' }, b.reason), el('td', { class: 'wrap' }, b.by),
        el('td', {}, el('button', { type: 'button', class: 'danger', onclick: () => act('unblock ' + who, async () => {
          await api('DELETE', '/projects/' + encodeURIComponent(slug) + '/blocks/' + encodeURIComponent(who)); loadBlocks();
          return 'unblocked ' + who;
        }) }, 'Unblock')))));
      if (!entries.length) blocksBody.append(el('tr', {}, el('td', { colspan: '4', class: 'muted' }, 'Nobody is blocked here.')));
    } catch (err) { flash('blocks: ' + err.message, true); }
  };
  const blockWho = el('input', { id: 'block-who', type: 'text', placeholder: 'nickname or IP' });
  const blockReason = el('input', { id: 'block-reason', type: 'text', placeholder: 'shown to the warrior' });
  blocks.append(table('blocks', ['Who', 'Reason', 'By', ''], blocksBody), el('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    if (await act('block ' + blockWho.value, async () => {
      await api('PUT', '/projects/' + encodeURIComponent(slug) + '/blocks/' + encodeURIComponent(blockWho.value), { reason: blockReason.value });
      return 'blocked ' + blockWho.value;
    })) { blockWho.value = ''; blockReason.value = ''; loadBlocks(); }
  } }, el('div', {}, el('label', { for: 'block-who' }, 'Block'), blockWho), el('div', {}, el('label', { for: 'block-reason' }, 'Reason'), blockReason),
  el('button', { type: 'submit', id: 'block' }, 'Block')));
  view.append(blocks);
  loadBlocks();

  // Settings, each with its explanation and current value.
  const settings = el('section', { class: 'panel', id: 'settings' }, el('h2', {}, 'Settings'));
  const inputs = {};
  const rows = SETTINGS.map(([key, type, help]) => {
    let input;
    if (type === 'bool') input = el('input', { type: 'checkbox', checked: Boolean(p[key]), name: key });
    else if (type === 'json') input = el('span', { class: 'wrap' }, valueText(p[key]));
    else input = el('input', { type: type === 'number' ? 'number' : 'text', step: 'any', value: valueText(p[key]), name: key });
    if (type !== 'json') inputs[key] = [input, type];
    return el('tr', { 'data-setting': key }, el('td', {}, key), el('td', {}, input), el('td', { class: 'help' }, help));
  });
  rows.push(el('tr', { 'data-setting': 'backfeed_secret' }, el('td', {}, 'backfeed_secret'),
    el('td', {}, p.secret_fp !== undefined ? 'fingerprint ' + (p.secret_fp || '(none)') : (p.backfeed_secret ? 'set (hidden)' : 'none')),
    el('td', { class: 'help' }, 'The secret of the backfeed URL; never shown here. Rotate it above.')));
  settings.append(el('form', { onsubmit: async (ev) => {
    ev.preventDefault();
    const patch = {};
    for (const [key, [input, type]] of Object.entries(inputs)) {
      const v = type === 'bool' ? input.checked : type === 'number' ? Number(input.value) : input.value;
      if (valueText(v) !== valueText(p[key])) patch[key] = v;
    }
    if (!Object.keys(patch).length) { flash('settings: nothing changed'); return; }
    if (await act('save settings', async () => {
      await api('PATCH', '/projects/' + encodeURIComponent(slug), patch);
      return 'saved ' + Object.keys(patch).join(', ');
    })) setTimeout(reload, 0);
  } }, table('settings', ['Setting', 'Value', 'What it does'], rows), el('button', { type: 'submit', id: 'save-settings' }, 'Save settings')));
  view.append(settings);

  // The project's admin log.
  const log = el('section', { class: 'panel', id: 'log' });
  view.append(log);
  logView(log, '/projects/' + encodeURIComponent(slug) + '/log');
}

// ---- admin log ------------------------------------------------------

async function logView(view, path) {
  const filter = el('input', { id: 'log-filter', type: 'text', placeholder: 'filter by account, change or project' });
  const body = el('tbody');
  let entries = [];
  const draw = () => {
    const f = filter.value.toLowerCase();
    body.replaceChildren(...entries.filter((e) => !f || [e.by, e.what, e.project].join(' ').toLowerCase().includes(f)).map((e) =>
      el('tr', {}, el('td', {}, fmtTime(e.at)), el('td', { class: 'wrap by' }, e.by), el('td', { class: 'wrap' }, e.project || ''),
        el('td', { class: 'wrap what' }, e.what), el('td', { class: 'wrap details' }, valueText(e.details)))));
  };
  filter.addEventListener('input', draw);
  view.append(el('h2', {}, 'Admin log'), filter, table('adminlog', ['When', 'Who', 'Project', 'Change', 'Details'], body));
  try { entries = (await api('GET', path)).changes || []; draw(); } catch (err) {
    view.append(el('p', { class: 'flash error' }, err.message));
  }
}

// ---- accounts (admin) -------------------------------------------------

async function accountsView(view) {
  const panel = el('section', { class: 'panel' }, el('h2', {}, 'Accounts'));
  view.append(panel);
  let data;
  try { data = await api('GET', '/accounts'); } catch (err) {
    panel.append(el('p', { class: 'flash error' }, err.message)); return;
  }
  panel.append(table('accounts', ['Account', 'Roles', ''], data.accounts.map((a) => {
    const roles = el('input', { type: 'text', value: a.roles.join(' '), 'aria-label': 'roles of ' + a.name });
    return el('tr', {}, el('td', { class: 'wrap' }, a.name), el('td', {}, roles), el('td', {},
      el('button', { type: 'button', onclick: () => act('set roles of ' + a.name, async () => {
        await api('PATCH', '/accounts/' + encodeURIComponent(a.name), { roles: roles.value.split(/\s+/).filter(Boolean) }); route();
      }) }, 'Set'), ' ',
      el('button', { type: 'button', class: 'danger', onclick: () => window.confirm('Remove ' + a.name + ' and revoke its tokens?') &&
        act('remove ' + a.name, async () => { await api('DELETE', '/accounts/' + encodeURIComponent(a.name)); route(); }) }, 'Remove')));
  })));
  const name = el('input', { id: 'account-name', type: 'text' });
  const roles = el('input', { id: 'account-roles', type: 'text', placeholder: 'project-admin:shop viewer:*' });
  panel.append(el('form', { class: 'row', onsubmit: (ev) => {
    ev.preventDefault();
    act('add ' + name.value, async () => {
      await api('POST', '/accounts', { name: name.value, roles: roles.value.split(/\s+/).filter(Boolean) }); route();
    });
  } }, el('div', {}, el('label', { for: 'account-name' }, 'New account'), name),
  el('div', {}, el('label', { for: 'account-roles' }, 'Roles'), roles), el('button', { type: 'submit' }, 'Add')));
}

// ---- tokens: an account's own (an admin's: every account's) ----------

async function tokensView(view) {
  const panel = el('section', { class: 'panel', id: 'tokens' }, el('h2', {}, isAdmin() ? 'Tokens of every account' : 'Your tokens'));
  view.append(panel);
  let tokens;
  try { tokens = await api('GET', '/tokens'); } catch (err) {
    panel.append(el('p', { class: 'flash error' }, err.message)); return;
  }
  panel.append(table('tokens', ['Account', 'Name', 'Created', 'Expires', 'Last used', ''], tokens.tokens.map((t) => el('tr', {},
    el('td', { class: 'wrap' }, t.account), el('td', { class: 'wrap token-name' }, t.name), el('td', {}, fmtTime(t.created_at)),
    el('td', {}, t.expires_at ? fmtTime(t.expires_at) + (t.expired ? ' (expired)' : '') : 'never'), el('td', {}, fmtTime(t.last_used) || 'never'),
    el('td', {}, el('button', { type: 'button', class: 'danger', onclick: () => act('revoke ' + t.name, async () => {
      await api('DELETE', '/tokens/' + encodeURIComponent(t.id)); route(); return 'revoked ' + t.name;
    }) }, 'Revoke'))))));
  // A new token is shown here once, in a field the page clears as soon
  // as it is left; it is never stored by the page.
  const name = el('input', { id: 'token-name', type: 'text', placeholder: 'laptop', required: true });
  const account = el('input', { id: 'token-account', type: 'text', placeholder: state.account });
  const expires = el('input', { id: 'token-expires', type: 'text', placeholder: 'never, or 720h' });
  const shown = el('input', { id: 'token-shown', type: 'text', readonly: true, autocomplete: 'off' });
  const once = el('div', { id: 'token-once', hidden: true }, el('label', { for: 'token-shown' },
    'The new token, shown this once: copy it now. Leaving this page forgets it.'), shown);
  panel.append(el('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { name: name.value };
    if (account.value) body.account = account.value;
    if (expires.value) body.expires_in = expires.value;
    await act('create token ' + name.value, async () => {
      const r = await api('POST', '/tokens', body);
      shown.value = r.token;
      once.hidden = false;
      shown.select();
      return `token ${r.name} of ${r.account} created`;
    });
  } }, el('div', {}, el('label', { for: 'token-name' }, 'New token'), name),
  isAdmin() ? el('div', {}, el('label', { for: 'token-account' }, 'for account'), account) : null,
  el('div', {}, el('label', { for: 'token-expires' }, 'expires in'), expires), el('button', { type: 'submit', id: 'create-token' }, 'Create')));
  panel.append(once);
}

// ---- plugins' pages ---------------------------------------------------
//
// A plugin declares its pages (sections over routes of its own admin API:
// a table, an object, a form); GET /api/v1/plugin-pages lists the sections
// this account may call, and each is read or sent through the forwarder
// (/api/v1/plugins/<name>/…), the same call the CLI makes. The plugin
// ships no markup or script: every value it answers is shown as text.

async function loadPluginPages() {
  const data = await api('GET', '/plugin-pages');
  state.pluginPages = data.plugins || [];
  return state.pluginPages;
}

async function pluginsView(view) {
  const panel = el('section', { class: 'panel', id: 'plugins' }, el('h2', {}, 'Plugins'));
  view.append(panel);
  let list;
  try { list = await loadPluginPages(); } catch (err) { panel.append(el('p', { class: 'flash error' }, err.message)); return; }
  if (!list.length) { panel.append(el('p', { class: 'muted' }, 'No plugin page you may see.')); return; }
  panel.append(el('ul', { class: 'projects' }, list.map((p) => el('li', {}, el('strong', {}, p.name), ' ',
    el('span', { class: 'badge' + (p.state === 'running' ? ' on' : '') }, p.state), ' ',
    p.pages.map((pg) => [el('a', { class: 'link plugin-page', href: '#/x/' + encodeURIComponent(p.name) + '/' + encodeURIComponent(pg.name) }, pg.title || pg.name), ' '])))));
}

async function pluginPageView(view, name, pageName) {
  flash(''); // the last page's message is not about this one
  let list = state.pluginPages;
  try { if (!list) list = await loadPluginPages(); } catch (err) { view.append(el('p', { class: 'flash error' }, err.message)); return; }
  const plugin = list.find((p) => p.name === name);
  const page = plugin && plugin.pages.find((p) => p.name === pageName);
  if (!page) { view.append(el('p', { class: 'flash error' }, 'No page ' + pageName + ' of plugin ' + name + ' that you may see.')); return; }
  view.append(el('h2', {}, name + ': ' + (page.title || page.name)),
    el('nav', { class: 'row small' }, plugin.pages.map((pg) => el('a', { class: 'link', href: '#/x/' + encodeURIComponent(name) + '/' + encodeURIComponent(pg.name) }, pg.title || pg.name))));
  for (const s of page.sections) view.append(pluginSection(name, s));
}

// kvTable shows an answer's fields, a nested value as JSON text.
function kvTable(data) {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return el('p', { class: 'wrap cell' }, valueText(data));
  const keys = Object.keys(data);
  if (!keys.length) return el('p', { class: 'muted' }, 'Nothing to show.');
  return el('table', { class: 'kv' }, el('tbody', {}, keys.map((k) => el('tr', {}, el('td', {}, k), el('td', { class: 'wrap cell' }, valueText(data[k]))))));
}

// rowsTable shows a list: one column per field of its rows.
function rowsTable(data, field) {
  let rows = field && data && typeof data === 'object' ? data[field] : data;
  if (!Array.isArray(rows) && data && typeof data === 'object') rows = Object.values(data).find(Array.isArray);
  if (!Array.isArray(rows)) return kvTable(data);
  if (!rows.length) return el('p', { class: 'muted' }, 'Nothing to show.');
  const cols = [];
  for (const r of rows.slice(0, 100)) {
    if (r && typeof r === 'object' && !Array.isArray(r)) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
  }
  const other = data && typeof data === 'object' && !Array.isArray(data)
    ? Object.entries(data).filter(([, v]) => !Array.isArray(v)).map(([k, v]) => k + ': ' + valueText(v)).join(' · ') : '';
  return el('div', {}, other ? el('p', { class: 'muted small wrap' }, other) : null,
    cols.length ? table('rows', cols, rows.map((r) => el('tr', {}, cols.map((c) => el('td', { class: 'wrap cell' }, valueText(r[c]))))))
      : table('rows', ['value'], rows.map((r) => el('tr', {}, el('td', { class: 'wrap cell' }, valueText(r))))));
}

function pluginSection(plugin, s) {
  const method = s.method || 'GET';
  const sec = el('section', { class: 'panel plugin-section', 'data-section': s.title, 'data-kind': s.kind }, el('h2', {}, s.title),
    s.help ? el('p', { class: 'muted small' }, s.help) : null);
  const result = el('div', { class: 'result' });
  const inputs = (s.fields || []).map((f) => {
    const id = 'f-' + Math.random().toString(36).slice(2);
    const input = f.type === 'bool' ? el('input', { id, type: 'checkbox', name: f.name })
      : el('input', { id, type: f.type === 'number' ? 'number' : 'text', step: 'any', name: f.name, required: Boolean(f.required), autocomplete: 'off', spellcheck: 'false' });
    return { f, input, box: el('div', {}, el('label', { for: id }, f.label || f.name), input) };
  });
  const call = async () => {
    let path = s.path;
    const query = new URLSearchParams();
    const body = {};
    for (const { f, input } of inputs) {
      const raw = f.type === 'bool' ? input.checked : input.value.trim();
      if (f.required && (raw === '' || raw === false)) throw new Error((f.label || f.name) + ' is required');
      // An empty input is left out; an unticked box is sent as false only
      // in a body (in a path or a query it is left out too).
      if (raw === '' || (raw === false && f.in && f.in !== 'body')) continue;
      const v = f.type === 'number' ? Number(raw) : raw;
      if (f.in === 'path') path = path.split('{' + f.name + '}').join(encodeURIComponent(raw));
      else if (f.in === 'query') query.set(f.name, String(raw));
      else body[f.name] = v;
    }
    const q = query.toString();
    const url = '/plugins/' + encodeURIComponent(plugin) + path + (q ? '?' + q : '');
    return api(method, url, method === 'GET' || method === 'DELETE' ? undefined : body);
  };
  const show = (data) => result.replaceChildren(s.kind === 'table' ? rowsTable(data, s.rows) : kvTable(data));
  if (s.kind === 'form') {
    sec.append(el('form', { class: 'row', onsubmit: async (ev) => {
      ev.preventDefault();
      await act(s.title, async () => { show(await call()); return s.title + ': done'; });
    } }, inputs.map((i) => i.box), el('button', { type: 'submit', class: method === 'DELETE' ? 'danger' : '' }, method === 'GET' ? 'Show' : s.title)), result);
    return sec;
  }
  const load = async () => {
    try { show(await call()); } catch (err) {
      result.replaceChildren(el('p', { class: 'flash error' }, err.message + (err.status ? ` (HTTP ${err.status})` : '')));
    }
  };
  if (inputs.length) {
    sec.append(el('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); load(); } },
      inputs.map((i) => i.box), el('button', { type: 'submit' }, 'Show')));
  }
  sec.append(result);
  load();
  return sec;
}

// ---- start ------------------------------------------------------------

(async () => {
  try { signedIn(await api('GET', '/admin/session')); } catch { showSignIn(); }
})();
