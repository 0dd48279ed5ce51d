// The web UI's browser test, for web_ui_e2e.rs: puppeteer-core (web/tests, from npm) drives
// Debian's headless chromium over a store a `lab check` just recorded, and checks what a person
// would: the host is named; the axis times and the episode list agree, in UTC and in local time;
// legends name the lab's cgroup, not its path; the cause chain runs from root to consequence;
// the differential flame graph marks the lab's hot function as grown; keys move between
// episodes; a copied link opens the same view; a window brushed with the mouse gets its own
// findings and flame graph; the incident report opens offline, with no
// request leaving the file, and holds every part. Screenshots go to the artifacts directory.
// Prints one JSON line of what it measured; fails with a message on the first check that fails.
//
// usage: node web_ui.mjs BASE_URL EVENT_ID REPORT.html ARTIFACTS_DIR
// The browser runs with TZ=Asia/Kolkata (UTC+05:30), so local time and UTC differ.
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(join(process.env.WEB_TESTS_DIR, 'package.json'));
const puppeteer = require('puppeteer-core');

const [base, eventId, reportFile, shots] = process.argv.slice(2);
const OFFSET = 5.5 * 3600;
const fail = (msg) => { console.error('web_ui: ' + msg); process.exit(1); };
const check = (ok, msg) => { if (!ok) fail(msg); };
setTimeout(() => fail('timed out after 150 s'), 150_000).unref();

// The expected clock text of an epoch second in each zone, computed here, not by the page.
const clock = (s, local) => new Date((Math.floor(s) + (local ? OFFSET : 0)) * 1000).toISOString().slice(11, 19);

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--hide-scrollbars'],
  env: { ...process.env, TZ: 'Asia/Kolkata' },
  defaultViewport: { width: 1500, height: 1000 },
});
process.on('exit', () => { try { browser.process()?.kill('SIGKILL'); } catch { /* gone */ } });

async function open(url, what) {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400) errors.push(r.status() + ' ' + r.url()); });
  await page.goto(url);
  await page.waitForSelector(`body[data-${what}="ready"]`, { timeout: 60_000 })
    .catch(() => fail(`${url}: ${what} never became ready; errors: ${errors.join('; ')}`));
  await page.waitForSelector('body[data-flame="ready"]', { timeout: 60_000 })
    .catch(() => fail(`${url}: the flame graph never became ready`));
  page.errors = errors;
  return page;
}

// What the page shows, read from its DOM and its charts.
const read = (page) => page.evaluate(() => {
  const text = (sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent.trim());
  const p = JS.state.plots.find((u) => u.chartId === 'throttling');
  // The lab's hot function in the scenario's process (the soak beside it runs it too, as much
  // before the episode as during it).
  const fib = [...document.querySelectorAll('#flame g.frame[name="jitterscope_lab::worker::fib"]')]
    .find((g) => {
      for (let n = g.__data__; n; n = n.parent) if (n.data.name === 'lab-fibtest') return true;
      return false;
    })?.querySelector('rect');
  return {
    host: document.getElementById('host').textContent,
    url: location.search,
    zone: document.getElementById('tz').value,
    flameMode: document.getElementById('flame-mode').value,
    current: document.querySelector('#event-list li[aria-current="true"]')?.dataset.id || null,
    episodes: [...document.querySelectorAll('#event-list li')].map((li) => ({
      id: li.dataset.id, time: li.querySelector('time').textContent, text: li.textContent,
    })),
    events: JS.state.events.map((e) => ({ id: e.id, from: e.from_ns / 1e9 })),
    ticks: JS.state.plots.map((u) => ({ splits: u.axes[0]._splits, values: u.axes[0]._values })),
    legends: p ? [...p.root.querySelectorAll('.u-legend .u-series')].slice(1).map((r) => ({
      label: r.querySelector('.u-label').textContent, title: r.title,
    })) : [],
    chain: [...document.querySelectorAll('#chain .chain-node')].map((g) => ({ rule: g.dataset.rule, depth: Number(g.dataset.depth) })),
    findings: [...document.querySelectorAll('#findings-body .finding')].map((f) => f.dataset.rule),
    remediation: text('.remediation li').length,
    culpritRow: document.querySelector('#findings-body .finding .culprit-row td:nth-child(2)')?.textContent || null,
    evidence: document.querySelectorAll('#evidence .chart.evidence .uplot').length,
    flameSvg: !!document.querySelector('#flame svg.d3-flame-graph'),
    fibFill: fib ? fib.getAttribute('fill') : null,
    grew: text('#flame-changes ol.grew li'),
    selection: document.getElementById('selection').textContent,
    errors: text('.error'),
  };
});

// Every axis label and the episode list's times are what this script computes for the zone.
function checkTimes(v, local) {
  const zone = local ? 'local' : 'UTC';
  let ticks = 0;
  for (const t of v.ticks) {
    check(t.splits && t.values && t.splits.length === t.values.length, 'no axis ticks to read');
    t.splits.forEach((s, i) => {
      check(t.values[i] === clock(s, local), `${zone}: axis label ${t.values[i]} for ${s}, expected ${clock(s, local)}`);
      ticks++;
    });
  }
  check(ticks > 10, `${zone}: only ${ticks} axis labels`);
  for (const e of v.episodes) {
    const ev = v.events.find((x) => x.id === e.id);
    check(e.time === clock(ev.from, local), `${zone}: the list says ${e.time} for ${e.id}, expected ${clock(ev.from, local)}`);
  }
}

const out = {};

// 1. A deep link to the episode, in UTC.
let page = await open(`${base}/?event=${encodeURIComponent(eventId)}`, 'evidence');
let v = await read(page);
check(v.host.length > 0 && !v.host.startsWith('unnamed'), `the header names no host: ${v.host}`);
check(v.current === eventId, `the linked episode is not the current one: ${v.current}`);
checkTimes(v, false);
check(v.legends.some((l) => l.label === 'cfs-throttle' && l.title.startsWith('cgroup./jitterscope-lab/cfs-throttle.')),
  `the throttling legend does not name the lab's cgroup: ${JSON.stringify(v.legends)}`);
check(v.legends.every((l) => !l.label.startsWith('cgroup.')), `a legend shows a raw series name: ${JSON.stringify(v.legends)}`);
check(v.episodes.some((e) => e.text.includes('in cfs-throttle') && e.text.includes('%')),
  `the episode list does not say where and in which unit: ${JSON.stringify(v.episodes)}`);
const root = v.chain.find((c) => c.rule === 'cpu.cfs-throttling');
const after = v.chain.find((c) => c.rule === 'sched.runqueue-latency');
check(root && after && root.depth === 0 && after.depth > root.depth, `the chain is not root then consequence: ${JSON.stringify(v.chain)}`);
check(v.findings[0] === 'cpu.cfs-throttling', `the first finding is ${v.findings[0]}`);
check(v.remediation > 0, 'no remediation shown');
check((v.culpritRow || '').startsWith('lab-fibtest ('), `the culprit's row is not marked among the processes: ${v.culpritRow}`);
check(v.evidence > 0, 'no evidence chart');
check(v.flameMode === 'before' && v.flameSvg, 'no differential flame graph');
const rgb = (v.fibFill || '').match(/\d+/g)?.map(Number);
check(rgb && rgb[0] > rgb[2] + 20, `the hot function's frame is not coloured as grown: ${v.fibFill}`);
check(v.grew.length > 0, 'no function is listed as grown');
check(v.errors.length === 0 && page.errors.length === 0, `errors on the page: ${v.errors.concat(page.errors).join('; ')}`);
await page.screenshot({ path: join(shots, 'web-episode-utc.png'), fullPage: true });
out.utc = { chain: v.chain, legends: v.legends.map((l) => l.label), grew: v.grew.slice(0, 3), fib: v.fibFill };

// 2. Keys: j and k move to the next and the previous episode.
check(v.episodes.length > 1, 'one episode only: the keys cannot be tried');
await page.evaluate(() => document.activeElement && document.activeElement.blur());
const before = v.current;
const last = v.episodes[v.episodes.length - 1].id === before;
const [away, back] = last ? ['k', 'j'] : ['j', 'k'];
await page.keyboard.press(away);
await page.waitForFunction((id) => document.querySelector('#event-list li[aria-current="true"]')?.dataset.id !== id, { polling: 100, timeout: 10_000 }, before)
  .catch(() => fail(`the ${away} key did not move to another episode`));
await page.keyboard.press(back);
await page.waitForFunction((id) => document.querySelector('#event-list li[aria-current="true"]')?.dataset.id === id, { polling: 100, timeout: 10_000 }, before)
  .catch(() => fail(`the ${back} key did not move back`));
await page.waitForSelector('body[data-evidence="ready"]', { timeout: 60_000 });

// 3. Local time and the plain flame graph, chosen on the page: the URL keeps both.
await page.select('#tz', 'local');
await page.waitForFunction(() => location.search.includes('tz=local'), { polling: 100, timeout: 10_000 });
await page.waitForSelector('body[data-timeline="ready"]', { timeout: 60_000 });
await page.select('#flame-mode', 'plain');
await page.waitForFunction(() => location.search.includes('flame=plain') && document.body.dataset.flame === 'ready', { polling: 100, timeout: 60_000 });
await page.waitForSelector('body[data-evidence="ready"]', { timeout: 60_000 });
v = await read(page);
checkTimes(v, true);
check(v.flameMode === 'plain' && v.flameSvg && v.grew.length === 0, 'the plain flame graph is not shown');
await page.screenshot({ path: join(shots, 'web-episode-local.png'), fullPage: true });
const link = v.url;

// 4. The copied link opens the same view.
const again = await open(base + '/' + link, 'evidence');
const w = await read(again);
for (const k of ['current', 'zone', 'flameMode', 'selection']) {
  check(JSON.stringify(w[k]) === JSON.stringify(v[k]), `the link ${link} opens ${k} ${JSON.stringify(w[k])}, not ${JSON.stringify(v[k])}`);
}
check(JSON.stringify(w.chain) === JSON.stringify(v.chain), `the link opens another chain: ${JSON.stringify(w.chain)}, not ${JSON.stringify(v.chain)}`);
checkTimes(w, true);
out.link = link;

// 5. A window brushed on a timeline with the mouse: its findings and the plain flame graph of
// exactly that window; the URL keeps the selection; search marks the scenario's process.
await page.bringToFront();
const ev0 = v.events.find((e) => e.id === eventId);
const [bx0, bx1] = [Math.floor(ev0.from) - 2, Math.floor(ev0.from) + 6];
const box = await page.evaluate((a, b) => {
  const u = JS.state.plots[0];
  u.over.scrollIntoView({ block: 'center' });
  const o = u.over.getBoundingClientRect();
  return { x0: o.left + u.valToPos(a, 'x'), x1: o.left + u.valToPos(b, 'x'), y: o.top + o.height / 2 };
}, bx0, bx1);
await page.mouse.move(box.x0, box.y);
await page.mouse.down();
for (let i = 1; i <= 10; i++) await page.mouse.move(box.x0 + (box.x1 - box.x0) * i / 10, box.y);
await page.mouse.up();
await page.waitForFunction(() => location.search.includes('sel_from=') && !location.search.includes('event='), { polling: 100, timeout: 10_000 })
  .catch(() => fail('the brushed window is not in the URL'));
await page.waitForFunction(() => document.body.dataset.findings === 'ready' && document.body.dataset.flame === 'ready', { polling: 100, timeout: 60_000 })
  .catch(async () => fail('the brushed window never got its findings and flame graph: ' +
    JSON.stringify(await page.evaluate(() => ({ sel: JS.state.sel, ds: { ...document.body.dataset }, url: location.search })))));
const brushed = await page.evaluate(() => ({
  sel: JS.state.sel, url: location.search,
  flame: [document.getElementById('flame').dataset.mode, !!document.querySelector('#flame svg')],
  info: document.getElementById('flame-info').textContent,
  current: document.querySelector('#event-list li[aria-current="true"]') !== null,
}));
check(Math.abs(brushed.sel[0] - bx0) < 1 && Math.abs(brushed.sel[1] - bx1) < 1, `the brush selected ${brushed.sel}, not ${bx0}..${bx1}`);
check(brushed.flame[0] === 'plain' && brushed.flame[1], 'no plain flame graph of the brushed window');
check(!brushed.current, 'an episode is still marked current after brushing');
await page.type('#search', 'lab-fibtest');
const hits = await page.evaluate(() => [...document.querySelectorAll('#flame svg rect')].filter((r) => r.getAttribute('fill') === '#E600E6').length);
check(hits > 0, 'searching the flame graph for lab-fibtest marks nothing');
out.brushed = { url: brushed.url, info: brushed.info, search_hits: hits };

// 6. The page's report link serves a report.
const href = await page.$eval('#report-link', (a) => a.href);
const served = await (await fetch(href)).text();
check(served.startsWith('<!doctype html>') && served.includes('window.JITTERSCOPE_REPORT'), `the report link serves no report: ${served.slice(0, 200)}`);

// 7. The report file, offline: nothing may be fetched from anywhere.
const rep = await browser.newPage();
const blocked = [];
await rep.setRequestInterception(true);
rep.on('request', (r) => {
  if (r.url().startsWith('file:') || r.url().startsWith('data:')) r.continue();
  else { blocked.push(r.url()); r.abort(); }
});
await rep.setOfflineMode(true);
const errors = [];
rep.on('pageerror', (e) => errors.push(String(e)));
const t0 = Date.now();
await rep.goto('file://' + reportFile);
await rep.waitForSelector('body[data-evidence="ready"]', { timeout: 60_000 })
  .catch(() => fail(`the report never became ready: ${errors.join('; ')}`));
out.report_render_ms = Date.now() - t0;
const r = await read(rep);
check(blocked.length === 0, `the report asked the network for ${blocked.join(', ')}`);
check(r.host === v.host, `the report names host ${r.host}`);
check(r.chain.length >= 2 && r.chain.find((c) => c.rule === 'cpu.cfs-throttling')?.depth === 0, 'the report has no chain');
check(r.findings[0] === 'cpu.cfs-throttling' && r.remediation > 0, 'the report lacks findings or remediation');
check(r.culpritRow === v.culpritRow, `the report's culprit row is ${r.culpritRow}`);
check(r.evidence > 0 && r.flameSvg && r.grew.length > 0, 'the report lacks evidence charts or the differential flame graph');
check(r.errors.length === 0 && errors.length === 0, `errors in the report: ${r.errors.concat(errors).join('; ')}`);
const parts = await rep.evaluate(() => ({
  note: document.getElementById('report-note').textContent,
  timelines: JS.state.plots.length,
}));
check(parts.note.includes(eventId) && parts.timelines >= 4, `the report lacks its note or timelines: ${JSON.stringify(parts)}`);
await rep.select('#flame-mode', 'plain');
await rep.waitForFunction(() => document.body.dataset.flame === 'ready' && document.querySelector('#flame svg'), { polling: 100, timeout: 30_000 })
  .catch(() => fail('the report has no plain flame graph'));
await rep.select('#flame-mode', 'before');
await rep.waitForFunction(() => document.body.dataset.flame === 'ready' && document.querySelector('#flame-changes ol.grew'), { polling: 100, timeout: 30_000 });
await rep.screenshot({ path: join(shots, 'web-report.png'), fullPage: true });
out.report_timelines = parts.timelines;

console.log(JSON.stringify(out));
await browser.close();
process.exit(0);
