// Drives headless Chromium over the DevTools protocol for serve_e2e.rs: opens the UI, drags
// across the first chart from FROM to TO (epoch seconds) with real mouse events, waits for
// the findings and the flame graph, saves a screenshot, and prints what the page shows as
// one JSON line.
//
// usage: node --experimental-websocket web_drag.mjs URL FROM TO SCREENSHOT.png
// Node 20 has WebSocket behind that flag; no npm package is needed.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';

const [url, from, to, shot] = process.argv.slice(2);
const fail = (msg) => { console.error('web_drag: ' + msg); process.exit(1); };
setTimeout(() => fail('timed out after 90 s'), 90_000).unref();

const chrome = spawn('chromium', [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
  '--hide-scrollbars', '--remote-debugging-port=0', '--window-size=1400,1700', 'about:blank',
], { stdio: ['ignore', 'ignore', 'pipe'] });
process.on('exit', () => chrome.kill('SIGKILL'));

const wsUrl = await new Promise((resolve, reject) => {
  let err = '';
  chrome.stderr.on('data', (d) => {
    err += d;
    const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) resolve(m[1]);
  });
  chrome.on('exit', (c) => reject(new Error('chromium exited (' + c + '): ' + err.slice(-500))));
}).catch((e) => fail(e.message));

const ws = new WebSocket(wsUrl);
await new Promise((r, j) => { ws.onopen = r; ws.onerror = () => j(new Error('cannot connect')); })
  .catch((e) => fail(e.message));
let nextId = 1;
const pending = new Map();
const waiters = [];
ws.onmessage = (ev) => {
  const m = JSON.parse(ev.data);
  if (m.id && pending.has(m.id)) {
    const { resolve, reject } = pending.get(m.id);
    pending.delete(m.id);
    if (m.error) reject(new Error(m.error.message)); else resolve(m.result);
  } else if (m.method) {
    for (const w of waiters.splice(0)) {
      if (w.method === m.method) w.resolve(m.params); else waiters.push(w);
    }
  }
};
const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
  const id = nextId++;
  pending.set(id, { resolve, reject });
  ws.send(JSON.stringify({ id, method, params, sessionId }));
});
const event = (method) => new Promise((resolve) => waiters.push({ method, resolve }));

const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
const page = (m, p) => send(m, p, sessionId);
const evaluate = async (expr) => {
  const r = await page('Runtime.evaluate', { expression: expr, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error(expr + ': ' + r.exceptionDetails.text);
  return r.result.value;
};
const until = async (expr, what) => {
  for (let i = 0; i < 600; i++) {
    if (await evaluate(expr)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  fail('the page never showed ' + what);
};

await page('Page.enable');
await page('Runtime.enable');
const loaded = event('Page.loadEventFired');
await page('Page.navigate', { url });
await loaded;
await until("document.body.dataset.timeline === 'ready'", 'its timelines');

// The first chart's drawing area, and where FROM and TO fall in it (page coordinates).
const box = JSON.parse(await evaluate(`(() => {
  const u = state.plots[0];
  const o = u.over.getBoundingClientRect();
  return JSON.stringify({ x0: o.left + u.valToPos(${from}, 'x'), x1: o.left + u.valToPos(${to}, 'x'),
                          y: o.top + o.height / 2 });
})()`));
const mouse = (type, x, buttons) => page('Input.dispatchMouseEvent', {
  type, x, y: box.y, button: 'left', buttons, clickCount: type === 'mouseMoved' ? 0 : 1,
});
await mouse('mouseMoved', box.x0, 0);
await mouse('mousePressed', box.x0, 1);
for (let i = 1; i <= 10; i++) await mouse('mouseMoved', box.x0 + (box.x1 - box.x0) * i / 10, 1);
await mouse('mouseReleased', box.x1, 0);

await until("document.body.dataset.findings === 'ready' || document.body.dataset.findings === 'error'", 'findings');
await until("document.body.dataset.flame === 'ready'", 'a flame graph');
const shown = JSON.parse(await evaluate(`JSON.stringify({
  findings: document.body.dataset.findings,
  selection: document.getElementById('selection').textContent,
  search: location.search,
  rules: [...document.querySelectorAll('.finding')].map((f) => f.dataset.rule),
  titles: [...document.querySelectorAll('.finding h3')].map((h) => h.textContent),
  flame_svg: !!document.querySelector('#flame svg.d3-flame-graph'),
  flame_frames: document.querySelectorAll('#flame svg g').length,
  flame_text: document.getElementById('flame').textContent.slice(0, 20000),
  flame_info: document.getElementById('flame-info').textContent,
  episodes: [...document.querySelectorAll('#event-list li')].map((l) => l.dataset.id),
  errors: [...document.querySelectorAll('.error')].map((e) => e.textContent),
})`));

// Search highlights the storm's process in the flame graph.
await evaluate("document.getElementById('search').value = 'lab-madvise'; document.getElementById('search').dispatchEvent(new Event('input')); true");
shown.search_hits = await evaluate("[...document.querySelectorAll('#flame svg rect')].filter((r) => r.getAttribute('fill') === '#E600E6').length");
shown.search_info = await evaluate("document.getElementById('flame-info').textContent");

const png = await page('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true });
writeFileSync(shot, Buffer.from(png.data, 'base64'));
console.log(JSON.stringify(shown));
await send('Browser.close').catch(() => {});
process.exit(0);
