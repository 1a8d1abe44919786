// Open a page in Debian's headless chromium, wait for it to load, print JSON about it (title, the
// images that decoded, the number of tables) and save a full-page screenshot.
// Usage: node snapshot_page.mjs URL SCREENSHOT.png [--chromium /usr/bin/chromium]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const argv = process.argv.slice(2);
const i = argv.indexOf('--chromium');
const executablePath = i >= 0 ? argv.splice(i, 2)[1] : (process.env.CHROMIUM || '/usr/bin/chromium');
const [url, screenshot] = argv;
if (!url || !screenshot) {
  console.error('usage: node snapshot_page.mjs URL SCREENSHOT.png [--chromium PATH]');
  process.exit(1);
}
const args = ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];
const profile = mkdtempSync(join(tmpdir(), 'sansmq-chromium-'));
let context;
let status = 1;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath, headless: true, args, chromiumSandbox: false, timeout: 30000,
    viewport: { width: 1100, height: 900 },
  });
  const page = context.pages()[0] || await context.newPage();
  page.on('pageerror', e => console.error(`pageerror: ${e.message}`));
  await page.goto(url, { waitUntil: 'load', timeout: 30000 });
  const info = await page.evaluate(() => ({
    title: document.title,
    images: [...document.images].filter(im => im.complete && im.naturalWidth > 0)
      .map(im => decodeURIComponent(im.src.split('/').pop())),
    tables: document.querySelectorAll('table').length,
  }));
  await page.screenshot({ path: screenshot, fullPage: true });
  process.stdout.write(JSON.stringify(info) + '\n');
  status = 0;
} catch (err) {
  console.error(`snapshot_page: ${err && err.stack || err}`);
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
process.exit(status);
