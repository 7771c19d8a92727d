// The web admin in real headless Chromium (issue 24).
//
//   ADMIN_TOKENS='{"admin":"…","padmin":"…","viewer":"…"}' node admin.mjs <baseURL> <screenshot dir>
//
// Signs in as each role, at desktop and phone sizes, and does the page's
// actions through its own controls: an admin pauses and resumes, adds
// items by paste, moves them, releases a claim, saves a setting, rotates
// the backfeed secret and deletes a project after confirming; a project
// admin runs its own project and is refused another; a viewer reads and is
// refused every change; failed items are listed, one deleted and one
// requeued by the admin, and the viewer's requeue refused. An item named <img src=x onerror=alert(1)> and a
// title with markup must show as text everywhere (no <img>, no dialog).
// Prints one JSON line: {ok, steps: [..], flashes: {role: [..]}, screenshots: [..], errors: [..]}.
import { chromium } from 'playwright-core';

const [base, dir] = process.argv.slice(2);
const tokens = JSON.parse(process.env.ADMIN_TOKENS || '{}');
if (!base || !dir || !tokens.admin) {
  console.error('usage: ADMIN_TOKENS=… node admin.mjs <baseURL> <screenshot dir>');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const XSS = '<img src=x onerror=alert(1)>';
const XSS_FAILED = '<img src=x onerror=alert(3)>';
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
  page.on('dialog', async (d) => {
    if (d.type() === 'confirm') { result.steps.push(`${role}: confirm: ${d.message()}`); await d.accept(); return; }
    fail(`${role}: a ${d.type()} dialog opened: ${d.message()} (markup ran as code?)`);
    await d.dismiss();
  });
  page.on('console', (msg) => {
    const url = msg.location()?.url || '';
    // A refused call logs its HTTP status in the console; that is expected.
    if (msg.type() === 'error' && !url.endsWith('/favicon.ico') && !/status of 4\d\d/.test(msg.text())) {
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

async function flashAfter(page, role, action) {
  await page.evaluate(() => { const f = document.getElementById('flash'); f.textContent = ''; f.hidden = true; });
  await action();
  await page.waitForFunction(() => { const f = document.getElementById('flash'); return !f.hidden && f.textContent; }, null, { timeout: 10_000 });
  const text = await page.textContent('#flash');
  const error = await page.evaluate(() => document.getElementById('flash').classList.contains('error'));
  (result.flashes[role] ||= []).push((error ? 'REFUSED ' : 'OK ') + text);
  return { text, error };
}

async function openProject(page, slug) {
  await page.evaluate((s) => { location.hash = '#/p/' + s; }, slug);
  await page.waitForSelector('#settings, #view .flash.error', { timeout: 10_000 });
  await page.waitForFunction(() => document.querySelector('#claims tbody tr') || document.querySelector('#view .flash.error'), null, { timeout: 10_000 });
}

async function checkText(page, role) {
  const imgs = await page.evaluate(() => document.querySelectorAll('img').length);
  check(imgs === 0, `${role}: ${imgs} <img> element(s) in the page: markup was rendered`);
}

async function shot(page, name) {
  const file = `${dir}/admin-${name}.png`;
  await page.screenshot({ path: file, fullPage: true });
  result.screenshots.push(file);
}

// viewShots saves what a phone shows at the top of the page and at each
// of sections (a full-page phone screenshot is too tall to read).
async function viewShots(page, name, sections) {
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: `${dir}/admin-${name}-top.png` });
  result.screenshots.push(`${dir}/admin-${name}-top.png`);
  for (const sel of sections) {
    await page.evaluate((s) => document.querySelector(s).scrollIntoView(), sel);
    const file = `${dir}/admin-${name}-${sel.replace(/\W/g, '')}.png`;
    await page.screenshot({ path: file });
    result.screenshots.push(file);
  }
}

async function overflow(page, role, width) {
  const px = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(px <= 0, `${role}: the page is ${px}px wider than a ${width}px screen`);
}

try {
  const desktop = { width: 1280, height: 900 };
  const phone = { width: 390, height: 844 };

  // ---- admin -------------------------------------------------------
  {
    const role = 'admin';
    const { page, context } = await open(role, desktop);
    await page.waitForSelector('.projects li a');
    const projects = await page.$$eval('.projects li a', (as) => as.map((a) => a.textContent));
    result.steps.push(`${role}: projects ${projects.join(', ')}`);
    await openProject(page, 'own');
    const items = await page.$$eval('#claims td.item', (tds) => tds.map((td) => td.textContent));
    check(items.includes(XSS), `${role}: the claim of ${XSS} is not shown as text: ${JSON.stringify(items)}`);
    const title = await page.inputValue('tr[data-setting=title] input');
    check(title === '<b>Own</b> shop', `${role}: the title with markup reads ${JSON.stringify(title)}`);
    await checkText(page, role);
    await shot(page, 'admin-desktop');

    let f = await flashAfter(page, role, () => page.click('#pause'));
    check(!f.error && f.text.includes('paused own'), `${role}: pause: ${f.text}`);
    await page.waitForSelector('#pause:text("Resume")');
    f = await flashAfter(page, role, () => page.click('#pause'));
    check(!f.error && f.text.includes('resumed own'), `${role}: resume: ${f.text}`);
    await page.waitForSelector('#pause:text("Pause")');

    await page.fill('#add-items', 'page:one\npage:two\n' + XSS + '-queued\n');
    f = await flashAfter(page, role, () => page.click('#add'));
    check(!f.error && f.text.includes('queued 3 into todo'), `${role}: add: ${f.text}`);
    await page.waitForSelector('#move-from');
    await page.selectOption('#move-from', 'todo');
    await page.selectOption('#move-to', 'secondary');
    await page.selectOption('#move-kind', 'glob');
    await page.fill('#move-pattern', 'page:*');
    f = await flashAfter(page, role, () => page.click('#move'));
    check(!f.error && f.text.includes('moved 2 items'), `${role}: move: ${f.text}`);

    await page.waitForSelector('#claims tbody input[type=checkbox]');
    await page.check(`#claims tbody input[value="${XSS.replace(/"/g, '\\"')}"]`);
    f = await flashAfter(page, role, () => page.click('#claims-release'));
    check(!f.error && f.text.includes('released 1 claims'), `${role}: release: ${f.text}`);

    // Failed items: shown as text (item and reason), one deleted, one
    // requeued to redo.
    await page.waitForSelector('#failed td.item');
    const failedItems = await page.$$eval('#failed td.item', (tds) => tds.map((td) => td.textContent));
    check(failedItems.includes(XSS_FAILED), `${role}: the failed ${XSS_FAILED} is not shown as text: ${JSON.stringify(failedItems)}`);
    const why = await page.$$eval('#failed td.reason', (tds) => tds.map((td) => td.textContent));
    check(why.some((w) => w === 'reported: <script>alert(4)</script>'), `${role}: the failure reason is not shown as text: ${JSON.stringify(why)}`);
    await checkText(page, role);
    await page.check('#failed tbody input[value="fail:delete"]');
    f = await flashAfter(page, role, () => page.click('#failed-delete'));
    check(!f.error && f.text.includes('deleted 1 failed items'), `${role}: delete failed: ${f.text}`);
    await page.waitForFunction(() => !document.querySelector('#failed tbody input[value="fail:delete"]'));
    await page.check(`#failed tbody input[value="${XSS_FAILED.replace(/"/g, '\\"')}"]`);
    await page.selectOption('#failed-queue', 'redo');
    f = await flashAfter(page, role, () => page.click('#failed-requeue'));
    check(!f.error && f.text.includes('requeued 1 failed items'), `${role}: requeue failed: ${f.text}`);
    await page.waitForFunction(() => document.querySelectorAll('#failed tbody input[type=checkbox]').length === 1);

    await page.fill('#limit-groups-json', '[{"name":"users","type":"user","rate_per_minute":60,"burst":5}]');
    f = await flashAfter(page, role, () => page.click('#save-limit-groups'));
    check(!f.error && f.text.includes('limit groups saved (1)'), `${role}: limit groups: ${f.text}`);
    await page.waitForSelector('#limit-groups-json');
    await page.fill('#limit-groups-json', '[{"name":"bad","regex":"("}]');
    f = await flashAfter(page, role, () => page.click('#save-limit-groups'));
    check(f.error, `${role}: a bad regex was accepted: ${f.text}`);

    // A block whose reason holds markup shows as text.
    await page.fill('#block-who', 'tester9');
    await page.fill('#block-reason', '<script>alert("reason")</script><img src=x onerror=alert(2)>');
    f = await flashAfter(page, role, () => page.click('#block'));
    check(!f.error && f.text.includes('blocked tester9'), `${role}: block: ${f.text}`);
    await page.waitForSelector('#blocks td.reason');
    const reason = await page.textContent('#blocks td.reason');
    check(reason.startsWith('<script>'), `${role}: the block reason reads ${JSON.stringify(reason)}`);
    await checkText(page, role);

    await page.waitForSelector('tr[data-setting=claims_limit] input');
    await page.fill('tr[data-setting=claims_limit] input', '777');
    f = await flashAfter(page, role, () => page.click('#save-settings'));
    check(!f.error && f.text.includes('saved claims_limit'), `${role}: settings: ${f.text}`);
    await page.waitForSelector('#rotate');
    f = await flashAfter(page, role, () => page.click('#rotate'));
    check(!f.error && f.text.includes('rotated'), `${role}: rotate: ${f.text}`);
    const html = await page.content();
    check(!/backfeed_secret":"/.test(html), `${role}: a backfeed secret is in the page`);

    await page.waitForSelector('#log tbody tr');
    const log = await page.$$eval('#log tbody tr', (trs) => trs.map((tr) => [tr.querySelector('.by').textContent, tr.querySelector('.what').textContent]));
    result.steps.push(`${role}: project log ${JSON.stringify(log.slice(0, 8))}`);
    check(log.some(([by, what]) => by === 'web-admin' && what === 'items moved'), `${role}: the log does not name web-admin for the move`);
    await checkText(page, role);

    // Delete with confirmation.
    await openProject(page, 'doomed');
    await page.fill('#delete-confirm', 'wrong');
    f = await flashAfter(page, role, () => page.click('#delete'));
    check(f.error, `${role}: a wrong confirmation deleted: ${f.text}`);
    await page.fill('#delete-confirm', 'doomed');
    f = await flashAfter(page, role, () => page.click('#delete'));
    check(!f.error && f.text.includes('deleted doomed'), `${role}: delete: ${f.text}`);

    // The whole admin log, and accounts.
    await page.evaluate(() => { location.hash = '#/log'; });
    await page.waitForSelector('table.adminlog tbody tr');
    await page.fill('#log-filter', 'web-admin');
    const rows = await page.$$eval('table.adminlog tbody tr', (trs) => trs.length);
    result.steps.push(`${role}: ${rows} changes by web-admin in the admin log`);
    await checkText(page, role);
    await shot(page, 'admin-log-desktop');
    await page.evaluate(() => { location.hash = '#/accounts'; });
    await page.waitForSelector('table.accounts tbody tr');
    await shot(page, 'admin-accounts-desktop');

    // A cross-site-style change: the page's own fetch without the CSRF value.
    const status = await page.evaluate(async () => (await fetch('/api/v1/projects/own', { method: 'PATCH', body: '{"paused":true}', headers: { 'Content-Type': 'application/json' } })).status);
    check(status === 403, `${role}: a change without the CSRF value answered ${status}`);

    await page.click('#signout');
    await page.waitForSelector('#signin:not([hidden])');
    const after = await page.evaluate(async () => (await fetch('/api/v1/whoami')).status);
    check(after === 401, `${role}: after sign out /whoami answered ${after}`);
    result.steps.push(`${role}: signed out`);
    await context.close();
  }

  // ---- project admin: its project, not another ----------------------
  {
    const role = 'padmin';
    const { page, context } = await open(role, desktop);
    await page.waitForSelector('.projects li a');
    const projects = await page.$$eval('.projects li a', (as) => as.map((a) => a.textContent));
    check(JSON.stringify(projects) === '["own"]', `${role}: lists ${JSON.stringify(projects)}, want only own`);
    await openProject(page, 'own');
    let f = await flashAfter(page, role, () => page.click('#pause'));
    check(!f.error, `${role}: pause own: ${f.text}`);
    await page.waitForSelector('#pause:text("Resume")');
    f = await flashAfter(page, role, () => page.click('#pause'));
    check(!f.error, `${role}: resume own: ${f.text}`);
    await openProject(page, 'other');
    const refusal = await page.textContent('#view .flash.error');
    check(/may not GET .*project-admin:other/.test(refusal), `${role}: other project: ${refusal}`);
    result.steps.push(`${role}: other project refused: ${refusal}`);
    await shot(page, 'padmin-refused-desktop');

    // Its own tokens: make one, shown once, then gone from the page.
    await page.evaluate(() => { location.hash = '#/tokens'; });
    await page.waitForSelector('#tokens table');
    const names = await page.$$eval('#tokens td.token-name', (tds) => tds.map((td) => td.textContent));
    check(JSON.stringify(names) === '["browser"]', `${role}: sees tokens ${JSON.stringify(names)}, want only its own`);
    check(await page.$('#token-account') === null, `${role}: may name another account for a token`);
    await page.fill('#token-name', 'phone');
    await page.fill('#token-expires', '24h');
    f = await flashAfter(page, role, () => page.click('#create-token'));
    check(!f.error && f.text.includes('token phone of own-crew created'), `${role}: create token: ${f.text}`);
    const shown = await page.inputValue('#token-shown');
    check(/^hoard_[A-Za-z0-9_-]{43}$/.test(shown), `${role}: the new token is not shown once`);
    await page.evaluate(() => { location.hash = '#/'; });
    await page.waitForSelector('.projects li a');
    const left = await page.evaluate(() => document.body.innerHTML.includes('hoard_'));
    check(!left, `${role}: the new token stays in the page after leaving`);
    await context.close();
  }

  // ---- viewer: reads, is refused every change ------------------------
  for (const [size, name] of [[desktop, 'desktop'], [phone, 'phone']]) {
    const role = 'viewer';
    const { page, context } = await open(role, size);
    await openProject(page, 'own');
    const items = await page.$$eval('#claims td.item', (tds) => tds.map((td) => td.textContent));
    check(items.length > 0, `${role}: sees no claims`);
    await checkText(page, role);
    let f = await flashAfter(page, role, () => page.click('#pause'));
    check(f.error && /may not PATCH/.test(f.text), `${role}: pause was not refused: ${f.text}`);
    await page.fill('#add-items', 'viewer:item');
    f = await flashAfter(page, role, () => page.click('#add'));
    check(f.error && /may not POST/.test(f.text), `${role}: add was not refused: ${f.text}`);
    await page.waitForSelector('#claims tbody input[type=checkbox]');
    await page.locator('#claims tbody input[type=checkbox]').first().check();
    f = await flashAfter(page, role, () => page.click('#claims-release'));
    check(f.error && /may not POST/.test(f.text), `${role}: release was not refused: ${f.text}`);
    await page.waitForSelector('#failed tbody input[value="fail:keep"]');
    await page.check('#failed tbody input[value="fail:keep"]');
    f = await flashAfter(page, role, () => page.click('#failed-requeue'));
    check(f.error && /may not POST/.test(f.text), `${role}: requeue of a failed item was not refused: ${f.text}`);
    // Every failed item's date is shown whole, at both sizes (on a phone
    // it was cut to "2026-11-…").
    const cut = await page.$$eval('#failed td.at', (tds) => tds.filter((td) => td.scrollWidth > td.clientWidth + 1 || !/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$/.test(td.textContent)).map((td) => td.textContent));
    const dates = await page.$$eval('#failed td.at', (tds) => tds.length);
    check(dates > 0 && cut.length === 0, `${role} ${name}: failed items' dates cut or missing: ${JSON.stringify(cut)} of ${dates}`);
    const reasons = await page.$$eval('#blocks td.reason', (tds) => tds.map((td) => td.textContent));
    check(reasons.some((r) => r.includes('<img src=x onerror=alert(2)>')), `${role}: the block reason is not shown as text: ${JSON.stringify(reasons)}`);
    await page.fill('#block-who', 'tester8');
    f = await flashAfter(page, role, () => page.click('#block'));
    check(f.error && /may not PUT/.test(f.text), `${role}: block was not refused: ${f.text}`);
    await overflow(page, role, size.width);
    await shot(page, `viewer-${name}`);
    if (name === 'desktop') {
      await page.evaluate(() => { location.hash = '#/accounts'; });
      await page.waitForSelector('#view .flash.error');
      const refused = await page.textContent('#view .flash.error');
      check(/may not GET \/api\/v1\/accounts/.test(refused), `${role}: accounts: ${refused}`);
    }
    if (name === 'phone') await viewShots(page, 'viewer-phone', ['#claims', '#failed', '#log']);
    await context.close();
  }

  // ---- admin on a phone ------------------------------------------------
  {
    const role = 'admin';
    const { page, context } = await open(role, phone);
    await openProject(page, 'own');
    await checkText(page, role);
    await overflow(page, role, phone.width);
    await shot(page, 'admin-phone');
    await viewShots(page, 'admin-phone', ['#queues', '#settings']);
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
