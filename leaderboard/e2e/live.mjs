// End-to-end check of the live leaderboard in real headless Chromium (issue 5).
//
//   node live.mjs <urlA> <urlB> <slug> <screenshot.png>
//
// urlA and urlB are two hoard frontends on the same Redis. The script opens
// /<slug>/ on both, waits for their websockets, completes one item through
// frontend A's warrior API and measures how long each page takes to show it
// in the live log and in the done count, without a reload. It saves a desktop
// screenshot of page A to <screenshot.png> and a phone one to
// <screenshot>-phone.png, prints one JSON line and exits 0 only when every
// check passed and both pages updated within one second.
import { chromium } from 'playwright-core';

const [urlA, urlB, slug, shot] = process.argv.slice(2);
if (!urlA || !urlB || !slug || !shot) {
  console.error('usage: node live.mjs <urlA> <urlB> <slug> <screenshot.png>');
  process.exit(2);
}

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const LIVE_TIMEOUT_MS = 10_000;
const UPDATE_TIMEOUT_MS = 5_000;
const UPDATE_LIMIT_MS = 1_000;
const POLL_MS = 20;
const DOWNLOADER = 'tester1';
const COUNT_KEYS = ['todo', 'todo:backfeed', 'todo:secondary', 'todo:redo', 'out', 'done'];
const CHARTS = ['#chart-items', '#chart-hourly', '#chart-bytes', '#chart-downloaders'];

const phoneShot = shot.replace(/(\.png)?$/i, '-phone.png');
const result = {
  ok: false,
  elapsed_a_ms: null,
  elapsed_b_ms: null,
  polled_a_ms: null,
  polled_b_ms: null,
  item: null,
  done_before: {},
  done_after: {},
  screenshot: shot,
  screenshot_phone: phoneShot,
  errors: [],
};
const errors = result.errors;
const base = (url) => url.replace(/\/+$/, '');
const projectURL = (url) => `${base(url)}/${encodeURIComponent(slug)}/`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// watch records what a page reports as broken: console errors, uncaught
// exceptions, failed requests and main-frame navigations after the start.
function watch(page, name) {
  const state = { navigations: 0, armed: false };
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const where = msg.location()?.url || '';
    // Chromium asks for /favicon.ico on its own; a missing one is not the page's error.
    if (where.endsWith('/favicon.ico')) return;
    errors.push(`${name}: console error: ${msg.text()}${where ? ` (${where})` : ''}`);
  });
  page.on('pageerror', (err) => errors.push(`${name}: uncaught exception: ${err.message}`));
  page.on('requestfailed', (req) => {
    if (req.url().endsWith('/favicon.ico')) return;
    errors.push(`${name}: request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`);
  });
  page.on('framenavigated', (frame) => {
    if (state.armed && frame === page.mainFrame()) state.navigations++;
  });
  return state;
}

// open loads the project page and waits until its websocket is live.
async function open(context, url, name, page) {
  page ??= await context.newPage();
  const state = watch(page, name);
  const resp = await page.goto(projectURL(url), { waitUntil: 'load', timeout: LIVE_TIMEOUT_MS });
  if (!resp || resp.status() !== 200) {
    throw new Error(`${name}: GET ${projectURL(url)} answered ${resp ? resp.status() : 'nothing'}`);
  }
  try {
    await page.waitForFunction(
      () => document.querySelector('#status')?.textContent.trim() === 'live',
      null,
      { timeout: LIVE_TIMEOUT_MS, polling: POLL_MS },
    );
  } catch {
    const status = await page.evaluate(() => document.querySelector('#status')?.textContent ?? '(no #status element)');
    throw new Error(`${name}: #status never became "live" within ${LIVE_TIMEOUT_MS} ms (it says ${JSON.stringify(status.trim())})`);
  }
  return { page, state, name };
}

// layout checks that the page has every element of its contract.
async function layout({ page, name }) {
  const missing = await page.evaluate(
    ({ counts, charts }) => {
      const want = [
        ...counts.map((k) => `[data-count="${k}"]`),
        'tbody#log',
        'tbody#downloaders',
        ...charts.map((c) => `canvas${c}`),
      ];
      return want.filter((sel) => !document.querySelector(sel));
    },
    { counts: COUNT_KEYS, charts: CHARTS },
  );
  for (const sel of missing) errors.push(`${name}: no element matches ${sel}`);
}

async function doneCount(page) {
  return page.evaluate(() => {
    const el = document.querySelector('[data-count="done"]');
    if (!el) return null;
    const digits = el.textContent.replace(/\D/g, '');
    return digits === '' ? null : Number(digits);
  });
}

async function warrior(path, body) {
  const resp = await fetch(`${base(urlA)}/${encodeURIComponent(slug)}/${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'User-Agent': 'ArchiveTeam Warrior/0.10.3 Standalone' },
    body: JSON.stringify(body),
  });
  const text = await resp.text();
  if (resp.status !== 200) throw new Error(`POST /${slug}/${path} answered ${resp.status}: ${text.trim()}`);
  return text;
}

// CHECK_ITEM runs in the page: does it show the item's log row, and the done
// count one higher than before?
const CHECK_ITEM = ({ item, before }) => {
  const rows = [...document.querySelectorAll('tbody#log tr.log-row')].filter((r) => r.dataset.item === item);
  const el = document.querySelector('[data-count="done"]');
  const digits = el ? el.textContent.replace(/\D/g, '') : '';
  const done = digits === '' ? null : Number(digits);
  return { rows: rows.length, text: rows[0]?.textContent ?? '', done, counted: done === before + 1 };
};

// arm installs, before the done is sent, a MutationObserver that stamps the
// wall-clock time at which the page first shows the item and the new count.
// Polling the page over CDP alone would add its own round trips (tens of ms
// on a busy 2-core machine) to what the viewer sees.
async function arm({ page }, item, before) {
  await page.evaluate(
    ({ item, before, check }) => {
      const probe = new Function(`return (${check})`)();
      window.__seenAt = null;
      const look = () => {
        if (window.__seenAt === null) {
          const s = probe({ item, before });
          if (s.rows > 0 && s.counted) window.__seenAt = Date.now();
        }
      };
      new MutationObserver(look).observe(document.documentElement, {
        subtree: true, childList: true, characterData: true, attributes: true,
      });
      setInterval(look, 20);
    },
    { item, before, check: CHECK_ITEM.toString() },
  );
}

// waitForItem polls one page every 20 ms until it shows the item's log row
// and the done count one higher than before. It returns the ms from t0 to the
// moment the page showed both (stamped in the page), or null.
async function waitForItem({ page, name }, item, before, t0) {
  const deadline = t0 + UPDATE_TIMEOUT_MS;
  let last = null;
  for (;;) {
    const [state, seenAt] = await page.evaluate(
      ({ item, before, check }) => [new Function(`return (${check})`)()({ item, before }), window.__seenAt],
      { item, before, check: CHECK_ITEM.toString() },
    );
    last = state;
    const now = Date.now();
    if (last.rows > 0 && last.counted) {
      return { elapsed: seenAt === null ? now - t0 : Math.max(0, seenAt - t0), polled: now - t0, last };
    }
    if (now > deadline) break;
    await sleep(POLL_MS);
  }
  errors.push(
    `${name}: after ${UPDATE_TIMEOUT_MS} ms: ${last.rows} log rows for ${JSON.stringify(item)}, ` +
      `done count ${last.done} (wanted ${before + 1})`,
  );
  return { elapsed: null, polled: null, last };
}

let browser;
let pageA = null; // for a best-effort screenshot when a check throws
let shotTaken = false;
let exitCode = 1;
try {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--headless=new',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    timeout: 30_000,
  });
  const desktop = { viewport: { width: 1280, height: 900 } };
  const ctxA = await browser.newContext(desktop);
  const ctxB = await browser.newContext(desktop);

  // The index lists the project.
  const index = await ctxA.newPage();
  const indexResp = await index.goto(`${base(urlA)}/`, { waitUntil: 'load', timeout: LIVE_TIMEOUT_MS });
  if (!indexResp || indexResp.status() !== 200) errors.push(`index: GET / answered ${indexResp?.status()}`);
  const listed = await index.evaluate(
    (slug) => [...document.querySelectorAll('a.project')].some((a) => new URL(a.href).pathname.replace(/\/+$/, '') === `/${slug}`),
    slug,
  );
  if (!listed) errors.push(`index: no a.project link to /${slug}/`);
  await index.close();

  pageA = await ctxA.newPage();
  const [A, B] = await Promise.all([open(ctxA, urlA, 'A', pageA), open(ctxB, urlB, 'B')]);
  await layout(A);
  await layout(B);

  const marker = `m${Math.random().toString(36).slice(2)}`;
  for (const p of [A, B]) {
    await p.page.evaluate((m) => { window.__marker = m; }, marker);
    p.state.armed = true;
  }
  const before = { A: await doneCount(A.page), B: await doneCount(B.page) };
  result.done_before = before;
  if (before.A === null || before.B === null) throw new Error(`no readable done count: ${JSON.stringify(before)}`);

  const claimed = JSON.parse(await warrior('request', { downloader: DOWNLOADER, api_version: '2' }));
  const item = claimed.item_name;
  if (typeof item !== 'string' || item === '') throw new Error(`request gave no item: ${JSON.stringify(claimed)}`);
  result.item = item;

  await arm(A, item, before.A);
  await arm(B, item, before.B);
  const t0 = Date.now();
  const answer = await warrior('done', { downloader: DOWNLOADER, item, bytes: { data: 123456 } });
  if (answer.trim() !== 'OK') errors.push(`done answered ${JSON.stringify(answer)}`);
  const [seenA, seenB] = await Promise.all([waitForItem(A, item, before.A, t0), waitForItem(B, item, before.B, t0)]);
  result.elapsed_a_ms = seenA.elapsed;
  result.elapsed_b_ms = seenB.elapsed;
  result.polled_a_ms = seenA.polled;
  result.polled_b_ms = seenB.polled;
  result.done_after = { A: seenA.last.done, B: seenB.last.done };

  for (const [p, seen] of [[A, seenA], [B, seenB]]) {
    if (seen.elapsed !== null && seen.elapsed > UPDATE_LIMIT_MS) {
      errors.push(`${p.name}: the done took ${seen.elapsed} ms to show (limit ${UPDATE_LIMIT_MS} ms)`);
    }
    if (seen.last.rows > 1) errors.push(`${p.name}: ${seen.last.rows} log rows for one done of ${item}`);
    if (seen.last.rows > 0 && !seen.last.text.includes(DOWNLOADER)) {
      errors.push(`${p.name}: the log row for ${item} does not name ${DOWNLOADER}: ${JSON.stringify(seen.last.text)}`);
    }
    const still = await p.page.evaluate(() => window.__marker);
    if (still !== marker || p.state.navigations > 0) {
      errors.push(`${p.name}: the page reloaded or navigated (${p.state.navigations} navigations, marker ${JSON.stringify(still)})`);
    }
  }

  // The downloader table picks the warrior up too (it may be coalesced more slowly).
  try {
    await A.page.waitForSelector(`tbody#downloaders tr[data-downloader="${DOWNLOADER}"]`, { timeout: UPDATE_TIMEOUT_MS });
  } catch {
    errors.push(`A: no tbody#downloaders row for ${DOWNLOADER} within ${UPDATE_TIMEOUT_MS} ms`);
  }

  // Let the charts take the update before the pictures.
  await sleep(500);
  await A.page.screenshot({ path: shot, fullPage: true });
  shotTaken = true;

  // A phone opens the page fresh: it must catch up from stored state.
  const ctxPhone = await browser.newContext({
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
  });
  const phone = await open(ctxPhone, urlA, 'phone');
  try {
    await phone.page.waitForFunction(
      (item) => [...document.querySelectorAll('tbody#log tr.log-row')].some((r) => r.dataset.item === item),
      item,
      { timeout: UPDATE_TIMEOUT_MS, polling: POLL_MS },
    );
  } catch {
    errors.push(`phone: a freshly opened page does not show ${item} in the live log (no catch-up from stored state)`);
  }
  const overflow = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) errors.push(`phone: the page is ${overflow} px wider than the 390 px screen`);
  await sleep(500);
  await phone.page.screenshot({ path: phoneShot, fullPage: true });
} catch (err) {
  // Playwright's messages carry a call log with terminal colours.
  errors.push((err && err.message ? err.message : String(err)).replace(/\u001b\[[0-9;]*m/g, '').trim());
  if (pageA && !shotTaken) await pageA.screenshot({ path: shot, fullPage: true }).catch(() => {});
} finally {
  if (browser) await browser.close().catch(() => {});
  result.ok =
    errors.length === 0 &&
    result.elapsed_a_ms !== null &&
    result.elapsed_b_ms !== null &&
    result.elapsed_a_ms <= UPDATE_LIMIT_MS &&
    result.elapsed_b_ms <= UPDATE_LIMIT_MS;
  exitCode = result.ok ? 0 : 1;
  console.log(JSON.stringify(result));
}
process.exit(exitCode);
