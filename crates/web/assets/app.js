// jitterscope web UI, part 6 of 6: the page's state and what starts it. The state (window,
// episode, selection, zone, flame graph kind) lives in the URL, so a pasted link opens the
// same view; an incident report starts the same way from its embedded answers.
'use strict';

const st = {
  charts: [], range: null, from: null, to: null, events: [], plots: [], flame: null,
  sel: null, event: null, seq: 0, flameSeq: 0, flameMode: 'before',
};
JS.state = st;

// An episode's line in the list: what, where, how much against its baseline, all in units.
function episodeText(e) {
  const where = e.subject ? ' in ' + e.subject : '';
  const secs = Math.round((e.to_ns - e.from_ns) / 1e9) + 1;
  return JS.clock(e.from_ns / 1e9) + ' ' + e.what + where + ', ' + secs + ' s: peak ' +
    JS.fmt(e.peak, e.unit) + ' (baseline ' + JS.fmt(e.baseline, e.unit) + ')';
}

function renderEvents() {
  const list = document.getElementById('event-list');
  list.textContent = '';
  document.getElementById('event-count').textContent = '(' + st.events.length + ')';
  for (const e of st.events) {
    const li = JS.el('li', {
      tabindex: '0', 'data-id': e.id, title: e.series + ' (' + e.id + ')',
      'aria-current': e.id === st.event ? 'true' : null,
      class: e.id === st.event ? 'current' : null,
    }, JS.el('time', { datetime: new Date(e.from_ns / 1e6).toISOString() }, JS.clock(e.from_ns / 1e9)),
    episodeText(e).slice(JS.clock(e.from_ns / 1e9).length));
    const pick = () => selectEvent(e.id);
    li.addEventListener('click', pick);
    li.addEventListener('keydown', (k) => { if (k.key === 'Enter' || k.key === ' ') { k.preventDefault(); pick(); } });
    list.append(li);
  }
}

// An episode's seconds as its id says them (`<kind>@<start s>+<seconds>`), the way
// `diagnose --event` and `jitterscope report --event` read it: the page, a report and the
// command line then diagnose the same window.
function idSpan(id) {
  const m = /@(\d+)\+(\d+)$/.exec(id || '');
  return m ? [Number(m[1]), Number(m[1]) + Math.max(1, Number(m[2]))] : null;
}

function selectEvent(id) {
  const e = st.events.find((x) => x.id === id);
  if (!e) return;
  st.event = id;
  renderEvents();
  const [a, b] = idSpan(id) || [e.from_ns / 1e9, e.to_ns / 1e9];
  selectWindow(a - 10, b + 10, true);
}

function redrawMarks() {
  // The timelines keep their data; only the shading changes.
  for (const p of st.plots) p.redraw(false, false);
}

async function selectWindow(a, b, fromEvent) {
  if (!(b > a)) return;
  // Synchronised charts all report the same drag: act on it once.
  if (!fromEvent && st.sel && Math.abs(st.sel[0] - a) < 0.5 && Math.abs(st.sel[1] - b) < 0.5) return;
  if (!fromEvent && st.event) { st.event = null; renderEvents(); }
  st.sel = [a, b];
  const seq = ++st.seq;
  document.getElementById('selection').textContent = JS.clock(a) + ' – ' + JS.clock(b) + ' ' + JS.zoneName();
  JS.setParams({
    event: st.event,
    sel_from: st.event ? null : a.toFixed(3),
    sel_to: st.event ? null : b.toFixed(3),
  });
  redrawMarks();
  document.body.dataset.findings = 'loading';
  document.body.dataset.flame = 'loading';
  document.body.dataset.evidence = 'loading';
  document.getElementById('findings-body').textContent = 'diagnosing…';
  document.getElementById('chain').textContent = '';
  let report = null;
  // A newer selection made while waiting wins: its answers are the ones shown.
  try {
    report = await JS.source.findings(a, b);
    if (seq !== st.seq) return;
    JS.renderFindings(report);
    document.body.dataset.findings = 'ready';
  } catch (e) {
    if (seq !== st.seq) return;
    document.getElementById('findings-body').replaceChildren(JS.el('p', { class: 'error' }, e.message));
    document.body.dataset.findings = 'error';
  }
  const fseq = ++st.flameSeq;
  await JS.renderFlame(st, ...flameWindow(), fseq);
  if (fseq === st.flameSeq) document.body.dataset.flame = 'ready';
  if (report) await JS.renderEvidence(report, st, seq);
  if (seq === st.seq) document.body.dataset.evidence = 'ready';
  const link = document.getElementById('report-link');
  const url = JS.source.reportUrl(a, b, st.event);
  if (url) link.href = url;
}

// The flame graphs' window: an episode's own seconds (its id says them: the differential
// then compares the episode with as many seconds just before it, not with its own lead-in),
// else the selection.
function flameWindow() {
  const span = st.event && idSpan(st.event);
  return span ? [span[0], span[1] + 1] : st.sel;
}

let drawing = Promise.resolve();
function drawTimelines() {
  // One redraw at a time: a second waits for the first instead of interleaving with it.
  drawing = drawing.then(() => JS.drawTimelines(st, (a, b) => selectWindow(a, b)));
  return drawing;
}

async function show(from, to) {
  const t0 = performance.now();
  st.from = from;
  st.to = to;
  document.getElementById('from').value = JS.inputTime(from);
  document.getElementById('to').value = JS.inputTime(to);
  JS.setParams({ from: from.toFixed(3), to: to.toFixed(3) });
  JS.setStatus('loading…');
  document.body.dataset.timeline = 'loading';
  try {
    st.events = await JS.source.events(from, to);
  } catch (e) {
    st.events = [];
    document.getElementById('event-list').replaceChildren(JS.el('li', { class: 'error' }, e.message));
  }
  renderEvents();
  await drawTimelines();
  JS.setStatus(JS.clock(from, true) + ' – ' + JS.clock(to, true) + ' ' + JS.zoneName());
  // How long the timelines took, for whoever wonders (and for bench/web.mjs).
  st.drawnMs = Math.round(performance.now() - t0);
  document.getElementById('status').title = 'drawn in ' + st.drawnMs + ' ms';
  document.body.dataset.timeline = 'ready';
}
JS.show = show;

function header() {
  const r = st.range;
  const host = document.getElementById('host');
  host.textContent = (r.host || 'unnamed host') + (r.kernel ? ' · ' + r.kernel : '');
  document.title = (JS.report ? 'jitterscope report · ' : 'jitterscope · ') + (r.host || '');
  document.getElementById('span').textContent = 'recorded ' + JS.clock(r.from_ns / 1e9, true) +
    ' – ' + JS.clock(r.to_ns / 1e9, true) + ' ' + JS.zoneName();
  if (JS.report) {
    const R = JS.report;
    const libs = (R.libraries || []).map((l) => l.library + (l.version ? ' ' + l.version : '')).join(', ');
    document.getElementById('report-note').textContent = 'Incident report' +
      (R.event ? ' of episode ' + R.event : '') + ', made ' + R.made + ' by jitterscope ' + R.version +
      '. It holds this window only; it opens offline.' + (libs ? ' Libraries involved: ' + libs + '.' : '') +
      (R.source === 'fleet' ? ' Built from the fleet store: the timelines ' + R.missing : '');
  }
}

function move(step) {
  if (!st.events.length) return;
  const i = st.events.findIndex((e) => e.id === st.event);
  const j = i < 0 ? (step > 0 ? 0 : st.events.length - 1) : Math.min(st.events.length - 1, Math.max(0, i + step));
  selectEvent(st.events[j].id);
  const li = document.querySelector('#event-list li[data-id="' + CSS.escape(st.events[j].id) + '"]');
  if (li) li.focus();
}

async function main() {
  if (JS.report) document.body.classList.add('report');
  // A report without the seconds before its episode (one from a fleet store) opens on the
  // plain graph.
  const noBefore = JS.report && JS.report.flame && JS.report.flame.before && JS.report.flame.before.error;
  st.flameMode = JS.params.get('flame') === 'plain' || noBefore ? 'plain' : 'before';
  document.getElementById('flame-mode').value = st.flameMode;
  document.getElementById('tz').value = JS.utc() ? 'utc' : 'local';
  try {
    st.charts = await JS.source.charts();
    st.range = await JS.source.range();
  } catch (e) {
    JS.setStatus(e.message, true);
    return;
  }
  header();
  const R = JS.report;
  const last = st.range.to_ns / 1e9;
  const from = R ? R.view.from : JS.parseTime(JS.params.get('from') || '') ?? Math.max(st.range.from_ns / 1e9 - 1, last - 3600);
  const to = R ? R.view.to : JS.parseTime(JS.params.get('to') || '') ?? last + 1;
  await show(from, to);
  const ev = R ? R.event : JS.params.get('event');
  if (ev && st.events.some((e) => e.id === ev)) {
    selectEvent(ev);
  } else if (R) {
    selectWindow(R.window.from, R.window.to);
  } else {
    const a = JS.parseTime(JS.params.get('sel_from') || '');
    const b = JS.parseTime(JS.params.get('sel_to') || '');
    if (a !== null && b !== null) selectWindow(a, b);
  }

  document.getElementById('controls').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = JS.parseTime(document.getElementById('from').value);
    const t = JS.parseTime(document.getElementById('to').value);
    if (f === null || t === null || f >= t) { JS.setStatus('from and to must be times, from before to', true); return; }
    show(f, t);
  });
  document.getElementById('last-hour').addEventListener('click', async () => {
    const r = await JS.source.range();
    show(r.to_ns / 1e9 - 3600, r.to_ns / 1e9 + 1);
  });
  document.getElementById('tz').addEventListener('change', (ev) => {
    JS.setParams({ tz: ev.target.value === 'local' ? 'local' : null });
    // Every time on the page is written again in the new zone.
    header();
    show(st.from, st.to).then(() => { if (st.sel) selectWindow(st.sel[0], st.sel[1], true); });
  });
  document.getElementById('flame-mode').addEventListener('change', (ev) => {
    st.flameMode = ev.target.value;
    JS.setParams({ flame: st.flameMode === 'plain' ? 'plain' : null });
    if (st.sel) {
      const fseq = ++st.flameSeq;
      document.body.dataset.flame = 'loading';
      JS.renderFlame(st, ...flameWindow(), fseq).then(() => { if (fseq === st.flameSeq) document.body.dataset.flame = 'ready'; });
    }
  });
  document.getElementById('search').addEventListener('input', (ev) => {
    if (st.flame) st.flame.search(ev.target.value);
  });
  document.getElementById('reset-zoom').addEventListener('click', () => {
    if (st.flame) st.flame.resetZoom();
  });
  document.addEventListener('keydown', (k) => {
    if (k.target.closest && k.target.closest('input, select, textarea')) return;
    if (k.key === 'j') move(1);
    if (k.key === 'k') move(-1);
  });
}

main();
