// The project page's charts in real headless Chromium (issue 16).
//
//   node charts.mjs <projectURL> <screenshot.png>
//
// Opens the page at desktop size, waits until every chart has drawn, hovers
// the middle of the items-per-hour chart and reads the value it offers,
// saves a desktop screenshot and a phone one (<screenshot>-phone.png), then
// checks and screenshots the index page at both sizes (...-index.png), and
// prints one JSON line: {ok, hover, screenshot, screenshot_phone, errors}.
import { chromium } from 'playwright-core';

const [url, shot] = process.argv.slice(2);
if (!url || !shot) {
  console.error('usage: node charts.mjs <projectURL> <screenshot.png>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const phoneShot = shot.replace(/(\.png)?$/i, '-phone.png');
const result = { ok: false, hover: '', screenshot: shot, screenshot_phone: phoneShot, errors: [] };

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
    // A chart has drawn when its canvas has a hover handler.
    await page.waitForFunction(() => ['#chart-items', '#chart-hourly', '#chart-bytes', '#chart-downloaders']
      .every((id) => document.querySelector(id)?.onmousemove), null, { timeout: 15_000 });
    if (size.width > 1000) {
      const chart = page.locator('#chart-hourly');
      await chart.scrollIntoViewIfNeeded();
      const box = await chart.boundingBox();
      await chart.hover({ position: { x: box.width * 0.6, y: box.height / 2 } });
      result.hover = (await chart.getAttribute('title')) || '';
    }
    await page.screenshot({ path: file, fullPage: true });
    // The index page at the same size: counts written like the project
    // page's, every project listed.
    await page.goto(new URL('/', url).href, { waitUntil: 'load' });
    const listed = await page.locator('ul.projects li').count();
    if (listed < 1) result.errors.push(`index at ${size.width}px lists no project`);
    const text = await page.locator('main').innerText();
    if (!/1,\d{3} done/.test(text)) result.errors.push(`index at ${size.width}px does not write the done count with a separator: ${text}`);
    await page.screenshot({ path: file.replace(/\.png$/i, '-index.png'), fullPage: true });
    await page.close();
  }
  result.ok = result.errors.length === 0 && result.hover.length > 0;
} catch (err) {
  result.errors.push(String(err));
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
