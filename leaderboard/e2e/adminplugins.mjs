// The plugins' pages of the web admin in real headless Chromium (issue 24):
// the BitTorrent plugin declares its pages, hoard's console renders them.
//
//   ADMIN_TOKENS='{"admin":"…","site":"…","viewer":"…"}' HASH=<40 hex> node adminplugins.mjs <baseURL> <screenshot dir>
//
// An admin opens every page of the tracker (torrents, users, scoring,
// reaper, outbox) and registers a torrent through a form; a site account
// (plugin:bittorrent:site), on a phone, sees only the sections its scope
// opens and registers a torrent; a viewer of a project sees no plugin
// page. A client name <img src=x onerror=alert(1)> must show as text.
// Prints one JSON line: {ok, steps: [..], flashes: {role: [..]}, screenshots: [..], errors: [..]}.
import { chromium } from 'playwright-core';

const [base, dir] = process.argv.slice(2);
const tokens = JSON.parse(process.env.ADMIN_TOKENS || '{}');
const HASH = process.env.HASH || '';
if (!base || !dir || !tokens.admin || !HASH) {
  console.error('usage: ADMIN_TOKENS=… HASH=… node adminplugins.mjs <baseURL> <screenshot dir>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const XSS = '<img src=x onerror=alert(1)>';
const result = { ok: false, steps: [], flashes: {}, screenshots: [], errors: [] };
const fail = (msg) => result.errors.push(msg);
const check = (cond, msg) => { if (!cond) fail(msg); };

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

async function open(role, size) {
  const context = await browser.newContext({ viewport: size });
  const page = await context.newPage();
  page.on('pageerror', (err) => fail(`${role}: uncaught exception: ${err.message}`));
  page.on('dialog', async (d) => { fail(`${role}: a ${d.type()} dialog opened: ${d.message()}`); await d.dismiss(); });
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !/status of 4\d\d|status of 503/.test(msg.text()) && !(msg.location()?.url || '').endsWith('/favicon.ico')) {
      fail(`${role}: console error: ${msg.text()}`);
    }
  });
  await page.goto(base + '/admin/', { waitUntil: 'load' });
  await page.fill('#token', tokens[role]);
  await page.click('#signin-form button[type=submit]');
  await page.waitForSelector('#who:not([hidden])', { timeout: 10_000 });
  result.steps.push(`${role}: signed in as ${await page.textContent('#who')}`);
  return { page, context };
}

// openPage goes to a plugin page and waits until every section that reads
// on its own has its answer (a table, fields, or an error).
async function openPage(page, name) {
  await page.evaluate((n) => { document.getElementById('view').replaceChildren(); location.hash = '#/x/bittorrent/' + n; }, name);
  await page.waitForSelector('.plugin-section, #view .flash.error', { timeout: 10_000 });
  await page.waitForFunction(() => [...document.querySelectorAll('.plugin-section:not([data-kind=form])')]
    .every((s) => s.querySelector('.result').childElementCount > 0), null, { timeout: 10_000 });
  return page.$$eval('.plugin-section', (ss) => ss.map((s) => s.dataset.section));
}

async function submitForm(page, role, section, values) {
  const sec = `.plugin-section[data-section="${section}"]`;
  for (const [name, value] of Object.entries(values)) await page.fill(`${sec} input[name=${name}]`, value);
  await page.evaluate(() => { const f = document.getElementById('flash'); f.textContent = ''; f.hidden = true; });
  await page.click(`${sec} form button[type=submit]`);
  await page.waitForFunction(() => { const f = document.getElementById('flash'); return !f.hidden && f.textContent; }, null, { timeout: 10_000 });
  const text = await page.textContent('#flash');
  const error = await page.evaluate(() => document.getElementById('flash').classList.contains('error'));
  (result.flashes[role] ||= []).push((error ? 'REFUSED ' : 'OK ') + text);
  return { text, error, shown: await page.textContent(`${sec} .result`) };
}

async function noMarkup(page, role) {
  const imgs = await page.evaluate(() => document.querySelectorAll('img').length);
  check(imgs === 0, `${role}: ${imgs} <img> element(s) in the page: markup was rendered`);
}

async function shot(page, name, full) {
  const file = `${dir}/plugins-${name}.png`;
  await page.screenshot({ path: file, fullPage: full !== false });
  result.screenshots.push(file);
}

try {
  const desktop = { width: 1280, height: 900 };
  const phone = { width: 390, height: 844 };

  // ---- admin: every page, and a registration ---------------------------
  {
    const role = 'admin';
    const { page, context } = await open(role, desktop);
    await page.waitForSelector('#nav-plugins:not([hidden])', { timeout: 10_000 });
    await page.click('#nav-plugins');
    await page.waitForSelector('a.plugin-page');
    const pages = await page.$$eval('a.plugin-page', (as) => as.map((a) => a.textContent));
    result.steps.push(`${role}: plugin pages ${pages.join(', ')}`);
    await shot(page, 'admin-list', false);
    for (const name of ['torrents', 'users', 'scoring', 'reaper', 'outbox']) {
      const sections = await openPage(page, name);
      result.steps.push(`${role}: ${name}: ${sections.join(' | ')}`);
      await noMarkup(page, role);
      const errors = await page.$$eval('.plugin-section .result .flash.error', (es) => es.map((e) => e.textContent));
      check(errors.length === 0, `${role}: ${name}: sections answered errors: ${JSON.stringify(errors)}`);
      if (name === 'users') {
        const cells = await page.$$eval('.plugin-section[data-section="Client whitelist"] td', (tds) => tds.map((td) => td.textContent));
        check(cells.includes(XSS), `${role}: the client named ${XSS} is not shown as text: ${JSON.stringify(cells)}`);
      }
      if (name === 'torrents') {
        const reg = await submitForm(page, role, 'Register a torrent', { infohash: HASH, id: '1001', uploader: 'alice', value: '2' });
        check(!reg.error, `${role}: register refused: ${reg.text}`);
        check(reg.shown.includes(HASH), `${role}: the registration's answer does not show the hash: ${reg.shown}`);
        const show = await submitForm(page, role, 'Show a torrent', { infohash: HASH });
        check(!show.error && show.shown.includes('1001'), `${role}: the torrent does not show its id: ${show.text} ${show.shown}`);
        const bad = await submitForm(page, role, 'Show a torrent', { infohash: 'nothex' });
        check(bad.error, `${role}: a bad info hash was not refused: ${bad.text}`);
      }
      await shot(page, 'admin-' + name);
    }
    await context.close();
  }

  // ---- a site account on a phone: only what its scope opens ------------
  {
    const role = 'site';
    const { page, context } = await open(role, phone);
    await page.waitForSelector('#nav-plugins:not([hidden])', { timeout: 10_000 });
    await page.evaluate(() => { location.hash = '#/plugins'; });
    await page.waitForSelector('a.plugin-page');
    const pages = await page.$$eval('a.plugin-page', (as) => as.map((a) => a.textContent));
    result.steps.push(`${role}: plugin pages ${pages.join(', ')}`);
    // Its scope opens /torrents/… and /users/… and reading the outbox:
    // Scoring keeps only "A torrent's score" (/torrents/{infohash}/score),
    // and the reaper, whose routes it does not open, is not listed.
    check(!pages.includes('Reaper'), `${role}: a page its scope does not open is listed: ${pages}`);
    const scoring = await openPage(page, 'scoring');
    result.steps.push(`${role}: scoring: ${scoring.join(' | ')}`);
    check(scoring.length === 1 && scoring[0] === "A torrent's score", `${role}: scoring sections: ${scoring}`);
    const sections = await openPage(page, 'torrents');
    result.steps.push(`${role}: torrents: ${sections.join(' | ')}`);
    check(!sections.includes('Swarm totals') && !sections.includes('Top torrents'), `${role}: sections its scope does not open: ${sections}`);
    check(sections.includes('Register a torrent'), `${role}: no registration form: ${sections}`);
    const reg = await submitForm(page, role, 'Register a torrent', { infohash: HASH.replace(/^../, 'cd'), id: '1002' });
    check(!reg.error, `${role}: register refused: ${reg.text}`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 0, `${role}: the page is ${overflow}px wider than the phone`);
    await shot(page, 'site-phone-torrents');
    await noMarkup(page, role);
    // The API refuses what the page does not offer.
    const status = await page.evaluate(async () => (await fetch('/api/v1/plugins/bittorrent/stats', { credentials: 'same-origin' })).status);
    check(status === 403, `${role}: GET stats answered ${status}, not 403`);
    result.steps.push(`${role}: GET /api/v1/plugins/bittorrent/stats: ${status}`);
    await context.close();
  }

  // ---- a project viewer: no plugin page --------------------------------
  {
    const role = 'viewer';
    const { page, context } = await open(role, desktop);
    await page.waitForTimeout(500);
    const hidden = await page.evaluate(() => document.getElementById('nav-plugins').hidden);
    check(hidden, `${role}: the Plugins link is shown`);
    await page.evaluate(() => { location.hash = '#/x/bittorrent/torrents'; });
    await page.waitForSelector('#view .flash.error', { timeout: 10_000 });
    result.steps.push(`${role}: ${await page.textContent('#view .flash.error')}`);
    await context.close();
  }
  result.ok = result.errors.length === 0;
} catch (err) {
  fail(String(err && err.stack || err));
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
