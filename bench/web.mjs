// The web UI's speed on a large store, for bench/serve.sh: puppeteer-core (web/tests) drives
// Debian's headless chromium against a running `serve`. Measured: first paint (navigation to
// every timeline drawn) of the default hour and of a whole day, and redrawing after a window
// change (five shifts of the hour); then an incident report file opened offline (to its
// evidence drawn). Prints one JSON line.
//
// usage: node web.mjs BASE_URL LAST_EPOCH_S REPORT.html
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(join(process.env.WEB_TESTS_DIR, 'package.json'));
const puppeteer = require('puppeteer-core');
const [base, lastS, report] = process.argv.slice(2);
const last = Number(lastS);
setTimeout(() => { console.error('web.mjs: timed out'); process.exit(1); }, 300_000).unref();

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  defaultViewport: { width: 1500, height: 1000 },
});
const ready = (page, what) => page.waitForFunction((w) => document.body.dataset[w] === 'ready', { polling: 10, timeout: 120_000 }, what);

async function paint(url) {
  const page = await browser.newPage();
  await page.goto(url);
  await ready(page, 'timeline');
  // From the start of navigation to the last timeline drawn, by the page's own clock.
  const ms = await page.evaluate(() => performance.now());
  return { page, ms };
}

const out = {};
const hour = await paint(`${base}/?from=${last - 3600}&to=${last}`);
out.first_paint_hour_ms = Math.round(hour.ms);
const day = await paint(`${base}/?from=${last - 86400}&to=${last}`);
out.first_paint_day_ms = Math.round(day.ms);
await day.page.close();
const shifts = [];
for (let i = 1; i <= 5; i++) {
  const from = last - 3600 - i * 600;
  shifts.push(await hour.page.evaluate(async (f) => {
    const t0 = performance.now();
    await JS.show(f, f + 3600);
    return performance.now() - t0;
  }, from));
}
shifts.sort((a, b) => a - b);
out.window_change_ms = shifts.map(Math.round);
out.window_change_median_ms = Math.round(shifts[2]);
out.window_change_max_ms = Math.round(shifts[4]);
const rep = await browser.newPage();
await rep.setOfflineMode(true);
const t0 = Date.now();
await rep.goto('file://' + report);
await ready(rep, 'evidence');
out.report_render_ms = Date.now() - t0;
console.log(JSON.stringify(out));
await browser.close();
process.exit(0);
