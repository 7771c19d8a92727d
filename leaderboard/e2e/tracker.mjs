// The tracker page in real headless Chromium (issues 11 and 12).
//
//   node tracker.mjs <trackerURL> <screenshot.png>
//
// Opens /tracker/ at desktop and phone sizes, waits for the reaper's
// tables, reads every labelled table's rows and the totals, checks the
// page stays within the phone's width, saves a screenshot at each size
// (...-phone.png), and prints one JSON line:
// {ok, tables: {metric: [[cells…], …]}, totals: {label: text}, screenshot, screenshot_phone, errors}.
import { chromium } from 'playwright-core';

const [url, shot] = process.argv.slice(2);
if (!url || !shot) {
  console.error('usage: node tracker.mjs <trackerURL> <screenshot.png>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const phoneShot = shot.replace(/(\.png)?$/i, '-phone.png');
const result = { ok: false, tables: {}, totals: {}, screenshot: shot, screenshot_phone: phoneShot, errors: [] };

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  for (const [size, file] of [[{ width: 1280, height: 900 }, shot], [{ width: 390, height: 844 }, phoneShot]]) {
    const page = await browser.newPage({ viewport: size });
    page.on('pageerror', (err) => result.errors.push(`uncaught exception: ${err.message}`));
    page.on('console', (msg) => {
      if (msg.type() === 'error' && !(msg.location()?.url || '').endsWith('/favicon.ico')) {
        result.errors.push(`console error: ${msg.text()}`);
      }
    });
    await page.goto(url, { waitUntil: 'load' });
    await page.waitForSelector('table[data-metric="reaper_torrents"] tbody tr', { timeout: 15_000 });
    await page.waitForSelector('table[data-view="countries"] tbody tr', { timeout: 15_000 });
    result.tables = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('table.tracker-series')]
      .map((t) => [t.dataset.metric || t.dataset.view, [...t.querySelectorAll('tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))])));
    result.totals = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('.plugin-metrics > div')]
      .map((d) => [d.querySelector('dt').textContent, d.querySelector('dd').textContent])));
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (overflow > 0) result.errors.push(`the page is ${overflow}px wider than a ${size.width}px screen`);
    await page.screenshot({ path: file, fullPage: true });
    await page.close();
  }
  result.ok = result.errors.length === 0;
} catch (err) {
  result.errors.push(String(err));
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
