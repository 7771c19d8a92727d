// Checks the project page's own logic (app.js) in real headless Chromium
// against a scripted stub server (leaderboard/page_browser_test.go):
//
//   node page.mjs <pageURL> <dropURL>
//
// The stub's first websocket sends a snapshot and then two updates whose
// entries arrive out of time order; stats.json was read (generated_at)
// between those two entries' times. The script checks that the live log is
// in time order, that a refresh of stats.json keeps the live completion
// newer than it, that "show all" says how many downloaders were left out,
// and, after asking the stub to drop the websocket, that the reconnect's
// snapshot sets the counts although its clock is behind the first one's.
// It prints one JSON line and exits 0 only when every check passed.
import { chromium } from 'playwright-core';

const [pageURL, dropURL] = process.argv.slice(2);
if (!pageURL || !dropURL) {
  console.error('usage: node page.mjs <pageURL> <dropURL>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT_MS = 10_000;
const POLL_MS = 20;

const result = { ok: false, order: null, downloader_bytes: null, more: null, done_after_reconnect: null, errors: [] };
const errors = result.errors;

async function waitFor(page, what, fn, arg) {
  try {
    await page.waitForFunction(fn, arg, { timeout: TIMEOUT_MS, polling: POLL_MS });
    return true;
  } catch {
    errors.push(`${what} within ${TIMEOUT_MS} ms`);
    return false;
  }
}

let browser;
try {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    timeout: 30_000,
  });
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  page.on('pageerror', (err) => errors.push(`uncaught exception: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !(msg.location()?.url || '').endsWith('/favicon.ico')) errors.push(`console error: ${msg.text()}`);
  });
  const resp = await page.goto(pageURL, { waitUntil: 'load', timeout: TIMEOUT_MS });
  if (!resp || resp.status() !== 200) throw new Error(`GET ${pageURL} answered ${resp ? resp.status() : 'nothing'}`);

  // 1. The live log is newest first by time, whatever the arrival order.
  if (await waitFor(page, 'the live log never showed 3 rows',
    () => document.querySelectorAll('tbody#log tr.log-row').length === 3)) {
    result.order = await page.evaluate(() => [...document.querySelectorAll('tbody#log tr.log-row')].map((r) => r.dataset.item));
    if (result.order.join(',') !== 'c,b,a') errors.push(`live log order ${result.order.join(',')}, wanted c,b,a`);
  }

  // 2. After the refresh that follows live activity, the downloader keeps
  // the completion newer than stats.json (10 B + 5 B), not the older one.
  const bytesCell = 'tbody#downloaders tr[data-downloader="x"] td:nth-child(3)';
  await waitFor(page, 'the downloader row never showed 15 B after the stats refresh',
    (sel) => document.querySelector(sel)?.textContent === '15 B', bytesCell);
  result.downloader_bytes = await page.evaluate((sel) => document.querySelector(sel)?.textContent ?? null, bytesCell);

  // 3. "show all" says how many stats.json left out.
  await page.check('#show-all');
  result.more = await page.evaluate(() => {
    const el = document.querySelector('#downloaders-more');
    return el && !el.hidden ? el.textContent : null;
  });
  if (result.more !== 'and 599 more') errors.push(`#downloaders-more says ${JSON.stringify(result.more)}, wanted "and 599 more"`);

  // 4. A reconnect's snapshot sets the counts even with an earlier clock.
  const drop = await fetch(dropURL);
  if (drop.status !== 200) errors.push(`GET ${dropURL} answered ${drop.status}`);
  await waitFor(page, 'the done count never showed the reconnect snapshot\'s 42',
    () => document.querySelector('[data-count="done"]')?.textContent === '42');
  result.done_after_reconnect = await page.evaluate(() => document.querySelector('[data-count="done"]')?.textContent ?? null);
} catch (err) {
  errors.push((err && err.message ? err.message : String(err)).replace(/\u001b\[[0-9;]*m/g, '').trim());
} finally {
  if (browser) await browser.close().catch(() => {});
  result.ok = errors.length === 0;
  console.log(JSON.stringify(result));
}
process.exit(result.ok ? 0 : 1);
