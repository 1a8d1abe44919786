// Walk the admin page in Debian's headless chromium: log in, visit every page, run the actions,
// save a screenshot of each step. Prints one JSON line: {ok, steps, errors} (errors: console
// errors, page errors and failed steps).
// Usage: node admin_page.mjs BASE_URL USER PASSWORD SCREENSHOT_DIR [--chromium PATH]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const argv = process.argv.slice(2);
const ci = argv.indexOf('--chromium');
const executablePath = ci >= 0 ? argv.splice(ci, 2)[1] : (process.env.CHROMIUM || '/usr/bin/chromium');
const [base, user, password, shots] = argv;
const args = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];
const profile = mkdtempSync(join(tmpdir(), 'sansmq-chromium-'));
const errors = [];
const steps = [];
let shot = 0;
const hardStop = setTimeout(() => { console.error('admin_page: hard timeout'); process.exit(2); }, 150000);
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath, headless: true, args, chromiumSandbox: false, timeout: 30000,
    viewport: { width: 1100, height: 800 },
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(8000);
  // the one error expected: the 401 of the wrong password, in the step that tries it
  let allowed = null;
  page.on('console', (m) => {
    if (m.type() === 'error' && !(allowed && m.text().includes(allowed))) errors.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.stack || e.message}`));
  const step = async (name, fn) => {
    try {
      await fn();
      steps.push(name);
    } catch (err) {
      errors.push(`${name}: ${err.message.split('\n')[0]}`);
    }
    await page.screenshot({ path: join(shots, `${String(++shot).padStart(2, '0')}-${name}.png`) });
  };
  const text = (sel, want) => page.waitForFunction(
    ([s, w]) => (document.querySelector(s)?.textContent || document.querySelector(s)?.value || '').includes(w),
    [sel, want]);

  await page.goto(base + '/', { timeout: 30000 });
  await step('login-wrong-password', async () => {
    allowed = 'status of 401';
    await page.fill('#user', user);
    await page.fill('#password', 'wrong');
    await page.click('#login button');
    await text('#login-error', 'Login failed');
  });
  await step('overview', async () => {
    allowed = null;
    await page.fill('#password', password);
    await page.click('#login button');
    await page.waitForSelector('#totals');
    await page.waitForSelector('svg[aria-label="message rates"] polyline');
    await page.waitForSelector('svg[aria-label="queued messages"] polyline');
  });
  await step('queues', async () => {
    await page.goto(base + '/#/queues');
    await page.waitForSelector('table#queues');
    await text('table#queues thead', 'publish/s');  // the per-queue rates
    await page.fill('#add-queue input[name=name]', 'ui-queue');
    await page.click('#add-queue button');
    await page.waitForSelector('table#queues a[href="#/queue/%2F/ui-queue"]');
    await page.click('table#queues th[data-i="1"]');  // sort by name
  });
  await step('queue-publish-get', async () => {
    await page.click('table#queues a[href="#/queue/%2F/ui-queue"]');
    await page.waitForSelector('#publish');
    await text('#rates', 'publish');
    await page.fill('#publish input[name=payload]', 'hello from chromium');
    await page.click('#publish button');
    await text('#status', 'published');
    await page.click('#get button');
    await text('#messages', 'hello from chromium');
  });
  await step('queue-purge', async () => {
    await page.click('#purge');
    await text('#status', 'purged');
    await page.click('#get button');
    await text('#messages', '(empty)');
  });
  await step('queue-delete', async () => {
    await page.click('#delete');
    await page.waitForSelector('table#queues');
    await page.waitForFunction(() => !document.querySelector('a[href="#/queue/%2F/ui-queue"]'));
  });
  await step('exchanges', async () => {
    await page.goto(base + '/#/exchanges');
    await page.waitForSelector('table#exchanges');
    await text('table#exchanges', 'amq.topic');
    await page.waitForSelector('table#bindings');
  });
  await step('connections-close', async () => {
    await page.goto(base + '/#/connections');
    await page.waitForSelector('table#connections button.close');
    await page.click('table#connections button.close');
    await text('#status', 'closed');
  });
  await step('users', async () => {
    await page.goto(base + '/#/users');
    await page.waitForSelector('table#users');
    await text('table#users', user);
    await page.waitForSelector('table#vhosts');
    await page.waitForSelector('table#perms');
  });
  await step('definitions', async () => {
    await page.goto(base + '/#/definitions');
    await page.click('#export');
    await text('#defs', '"queues"');
    await page.fill('#defs', JSON.stringify({ queues: [{ name: 'ui-imported', vhost: '/', durable: true,
      auto_delete: false, arguments: {} }] }));
    await page.click('#import');
    await text('#status', 'imported');
    await page.goto(base + '/#/queues');
    await page.waitForSelector('a[href="#/queue/%2F/ui-imported"]');
  });
} catch (err) {
  errors.push(`admin_page: ${err && err.stack || err}`);
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(hardStop);
}
process.stdout.write(JSON.stringify({ ok: errors.length === 0, steps, errors }) + '\n');
process.exit(0);
