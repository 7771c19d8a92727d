// The project page's pace, ETAs and held-back notes, and the downloader
// page, in real headless Chromium (issue 25).
//
//   node rates.mjs <outDir> <downloaderURL> <name>=<projectURL>...
//
// For each project, at desktop (1280x900) and phone (390x844) size: waits
// until stats.json has been drawn, reads what the page says (items per
// minute, data per second, the ETA and its basis, the queue rows, the
// held-back notes, the downloaders' "now" column, the explanations of
// IRSR, reclaim serve rate and RTT), checks the phone page does not scroll
// sideways, and saves <outDir>/<name>-<size>.png. Then it opens the
// downloader page at both sizes and reads its rows. Prints one JSON line
// {ok, projects: {name: {desktop, phone}}, downloader: {...}, errors}.
import { chromium } from 'playwright-core';

const [outDir, downloaderURL, ...targets] = process.argv.slice(2);
if (!outDir || !downloaderURL || targets.length === 0) {
  console.error('usage: node rates.mjs <outDir> <downloaderURL> <name>=<projectURL>...');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SIZES = { desktop: { width: 1280, height: 900 }, phone: { width: 390, height: 844 } };
const result = { ok: false, projects: {}, downloader: {}, errors: [] };

function watch(page, where) {
  page.on('pageerror', (err) => result.errors.push(`${where}: uncaught exception: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !(msg.location()?.url || '').endsWith('/favicon.ico')) {
      result.errors.push(`${where}: console error: ${msg.text()}`);
    }
  });
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  for (const target of targets) {
    const [name, url] = target.split(/=(.*)/s);
    result.projects[name] = {};
    for (const [size, viewport] of Object.entries(SIZES)) {
      const page = await browser.newPage({ viewport });
      watch(page, `${name} ${size}`);
      await page.goto(url, { waitUntil: 'load' });
      // Drawn once the pace shows a rate and the charts have hover handlers.
      await page.waitForFunction(() => document.querySelector('#rate-items')?.textContent.includes('/min') &&
        ['#chart-items', '#chart-bytes'].every((id) => document.querySelector(id)?.onmousemove), null, { timeout: 15_000 });
      const seen = await page.evaluate(() => {
        const text = (sel) => document.querySelector(sel)?.textContent.trim() ?? null;
        const explain = (id) => document.querySelector(id)?.parentElement.querySelector('.explain')?.textContent.trim() ?? null;
        return {
          items_per_minute: text('#rate-items'),
          bytes_per_second: text('#rate-bytes'),
          eta: text('#eta-all'),
          eta_basis: text('#eta-basis'),
          queues: [...document.querySelectorAll('#queue-eta tr')].map((tr) => [...tr.cells].map((td) => td.textContent)),
          held_back: document.querySelector('#held')?.hidden ? [] : [...document.querySelectorAll('#held-list li')].map((li) => li.textContent),
          downloaders_now: [...document.querySelectorAll('#downloaders tr')].slice(0, 3).map((tr) => [tr.cells[1]?.textContent, tr.cells[4]?.textContent]),
          downloader_link: document.querySelector('#downloaders tr a.nick')?.getAttribute('href') ?? null,
          explains: { irsr: explain('#stat-irsr'), reclaim_serve_rate: explain('#stat-reclaim-serve-rate'), rtt: explain('#stat-rtt'),
            item_fail_rate: explain('#stat-item-fail-rate'), filter_rate: explain('#stat-filter-rate') },
          overflow_x: document.documentElement.scrollWidth - window.innerWidth,
        };
      });
      seen.screenshot = `${outDir}/${name}-${size}.png`;
      await page.screenshot({ path: seen.screenshot, fullPage: true });
      result.projects[name][size] = seen;
      if (size === 'phone' && seen.overflow_x > 0) result.errors.push(`${name} phone page scrolls sideways by ${seen.overflow_x}px`);
      await page.close();
    }
  }
  for (const [size, viewport] of Object.entries(SIZES)) {
    const page = await browser.newPage({ viewport });
    watch(page, `downloader ${size}`);
    await page.goto(downloaderURL, { waitUntil: 'load' });
    await page.waitForFunction(() => document.querySelectorAll('#projects tr').length > 0 || !document.querySelector('#message').hidden,
      null, { timeout: 15_000 });
    const seen = await page.evaluate(() => ({
      nick: document.querySelector('#nick').textContent,
      items: document.querySelector('#total-items').textContent,
      bytes: document.querySelector('#total-bytes').textContent,
      rows: [...document.querySelectorAll('#projects tr')].map((tr) => [...tr.cells].map((td) => td.textContent)),
      overflow_x: document.documentElement.scrollWidth - window.innerWidth,
    }));
    seen.screenshot = `${outDir}/downloader-${size}.png`;
    await page.screenshot({ path: seen.screenshot, fullPage: true });
    result.downloader[size] = seen;
    if (size === 'phone' && seen.overflow_x > 0) result.errors.push(`downloader phone page scrolls sideways by ${seen.overflow_x}px`);
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
