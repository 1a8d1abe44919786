// Open a page in Debian's headless chromium (never a downloaded browser build), wait until it
// sets window.__result, print that JSON on stdout. Console lines and page errors go to stderr.
// Usage: node run_page.mjs URL [--timeout-ms N] [--chromium /usr/bin/chromium]
// Exit status: 0 = a result was printed (whatever its "ok"), 2 = no result in time, 1 = launch error.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv.splice(i, 2)[1] : dflt;
};
const timeoutMs = Number(opt('--timeout-ms', '90000'));
const executablePath = opt('--chromium', process.env.CHROMIUM || '/usr/bin/chromium');
const url = argv[0];
if (!url) {
  console.error('usage: node run_page.mjs URL [--timeout-ms N] [--chromium PATH]');
  process.exit(1);
}

// Playwright adds --headless and its own automation flags; these keep chromium quiet and offline.
const args = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--disable-dev-shm-usage',
];
const profile = mkdtempSync(join(tmpdir(), 'sansmq-chromium-'));  // a fresh --user-data-dir
let context;
let status = 1;
const hardStop = setTimeout(() => {
  console.error(`run_page: hard timeout after ${timeoutMs + 15000} ms`);
  process.exit(2);
}, timeoutMs + 15000);
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath, headless: true, args, chromiumSandbox: false, timeout: 30000,
  });
  const page = context.pages()[0] || await context.newPage();
  page.on('console', m => console.error(`console.${m.type()}: ${m.text()}`));
  page.on('pageerror', e => console.error(`pageerror: ${e.message}`));
  await page.goto(url, { timeout: 30000 });
  status = 2;
  const handle = await page.waitForFunction(() => window.__result, null, { timeout: timeoutMs, polling: 100 });
  process.stdout.write(JSON.stringify(await handle.jsonValue()) + '\n');
  status = 0;
} catch (err) {
  console.error(`run_page: ${err && err.stack || err}`);
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(hardStop);
}
process.exit(status);
