// jitterscope web UI: timelines of the key jitter signals (uPlot), the episodes on them, and
// for a dragged window its findings and flame graph (d3-flame-graph). Talks only to /api/v1.
'use strict';

const params = new URLSearchParams(location.search);
const token = params.get('token');

// The charts come from the server (/api/v1/charts: title, unit, the series to select and how
// many to keep), which names them by metric handle: a renamed metric cannot leave a chart
// silently empty here.

// Distinguishable by dash pattern too, so meaning does not rest on colour alone.
const STROKES = ['#1f5fbf', '#c0392b', '#2e8b57', '#8e44ad', '#d35400', '#555555'];
const DASHES = [[], [6, 3], [2, 2], [10, 3, 2, 3], [4, 4], [1, 3]];

const state = { charts: [], from: null, to: null, events: [], plots: [], flame: null, sel: null, seq: 0 };

function setStatus(text, isError) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = isError ? 'error' : '';
}

async function api(path, query) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null) u.searchParams.set(k, v);
  }
  const r = await fetch(u, { headers: token ? { Authorization: 'Bearer ' + token } : {} });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
  return body;
}

const iso = (s) => new Date(s * 1000).toISOString();
const parseTime = (v) => {
  const n = Number(v);
  if (v !== '' && !Number.isNaN(n)) return n;
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : t / 1000;
};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function fmt(v, unit) {
  if (v === null || v === undefined) return '-';
  if (unit === 'bytes') {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + ' ' + u[i];
  }
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString('en');
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

// Shades the episodes behind each chart's lines.
function episodeBands(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = 'rgba(255, 140, 0, 0.18)';
  for (const e of state.events) {
    const a = u.valToPos(e.from_ns / 1e9 - 0.5, 'x', true);
    const b = u.valToPos(e.to_ns / 1e9 + 0.5, 'x', true);
    ctx.fillRect(a, u.bbox.top, Math.max(2, b - a), u.bbox.height);
  }
  ctx.restore();
}

async function drawCharts() {
  const box = document.getElementById('charts');
  box.textContent = '';
  state.plots.forEach((p) => p.destroy());
  state.plots = [];
  const width = Math.max(300, box.clientWidth - 10);
  // All charts are asked for at once: the server reads them in parallel.
  const asked = state.charts.map((p) => api('/api/v1/series', {
    select: p.select, from: state.from, to: state.to, points: Math.floor(width / 2), top: p.top,
  }).then((data) => ({ data }), (error) => ({ error })));
  for (const [i, p] of state.charts.entries()) {
    const holder = el('div', { class: 'chart', 'data-chart': p.id, 'data-select': p.select });
    holder.append(el('h3', { title: p.help.join('\n') }, p.title));
    box.append(holder);
    const { data, error: e } = await asked[i];
    if (e) {
      holder.append(el('p', { class: 'error' }, e.message));
      continue;
    }
    if (!data.series.length) {
      holder.append(el('p', { class: 'hint' }, 'not recorded in this range'));
      continue;
    }
    const series = [{}].concat(data.series.map((s, i) => ({
      label: s.name,
      stroke: STROKES[i % STROKES.length],
      dash: DASHES[i % DASHES.length],
      width: 1.5,
      spanGaps: false,
      value: (u, v) => fmt(v, s.unit),
    })));
    const opts = {
      width, height: 140, series,
      scales: { x: { time: true, min: state.from, max: state.to } },
      axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => fmt(v, data.series[0].unit)) }],
      cursor: { sync: { key: 'jitterscope' }, drag: { x: true, y: false, setScale: false } },
      hooks: {
        drawClear: [episodeBands],
        setSelect: [(u) => {
          if (u.select.width < 2) return;
          const a = u.posToVal(u.select.left, 'x');
          const b = u.posToVal(u.select.left + u.select.width, 'x');
          selectWindow(a, b);
        }],
      },
    };
    const plot = new uPlot(opts, [data.t].concat(data.series.map((s) => s.max)), holder);
    state.plots.push(plot);
  }
}

async function loadEvents() {
  const list = document.getElementById('event-list');
  list.textContent = '';
  try {
    state.events = await api('/api/v1/events', { from: state.from, to: state.to });
  } catch (e) {
    state.events = [];
    list.append(el('li', { class: 'error' }, e.message));
  }
  document.getElementById('event-count').textContent = '(' + state.events.length + ')';
  for (const e of state.events) {
    const li = el('li', { tabindex: '0', 'data-id': e.id },
      iso(e.from_ns / 1e9).slice(11, 19) + ' ' + e.what + ': peak ' + fmt(e.peak) +
      ' (baseline ' + fmt(e.baseline) + ') on ' + e.series);
    const pick = () => selectWindow(e.from_ns / 1e9 - 10, e.to_ns / 1e9 + 10);
    li.addEventListener('click', pick);
    li.addEventListener('keydown', (k) => { if (k.key === 'Enter') pick(); });
    list.append(li);
  }
  state.plots.forEach((p) => p.redraw(false));
}

function renderFindings(report) {
  const body = document.getElementById('findings-body');
  body.textContent = '';
  if (!report.findings.length) {
    body.append(el('p', {}, 'No finding: no rule matched this window (' + report.samples + ' samples).'));
    return;
  }
  for (const f of report.findings) {
    const box = el('div', { class: 'finding', 'data-rule': f.rule_id });
    box.append(el('h3', {},
      el('span', { class: 'kind' }, (f.mechanism ? 'MECHANISM ' : 'RESOURCE ') + f.confidence.toFixed(2) + ' '),
      f.title));
    const c = f.culprit;
    const who = [c.comm && (c.comm + (c.pid ? ' (' + c.pid + ')' : '')), c.cgroup, c.container,
      c.library && (c.library + (c.library_version ? ' ' + c.library_version : ''))].filter(Boolean);
    if (who.length) box.append(el('p', {}, 'Culprit: ' + who.join(', ')));
    const t = el('table', {}, el('tr', {}, el('th', {}, 'evidence'), el('th', {}, 'value'), el('th', {}, 'baseline'), el('th', {}, 'note')));
    for (const ev of f.evidence) {
      t.append(el('tr', {}, el('td', {}, ev.signal), el('td', {}, fmt(ev.value) + ' ' + ev.stat),
        el('td', {}, ev.baseline === null ? '-' : fmt(ev.baseline)), el('td', {}, ev.note)));
    }
    box.append(t);
    if (f.moved_first.length) {
      box.append(el('p', {}, 'Moved first: ' + f.moved_first.map((m) => m.signal + ' +' + m.lag_s + 's').join(', ')));
    }
    const ul = el('ul', {});
    f.remediation.forEach((r) => ul.append(el('li', {}, r)));
    box.append(el('p', {}, 'What to change:'), ul);
    body.append(box);
  }
}

async function renderFlame(a, b, seq) {
  const box = document.getElementById('flame');
  const info = document.getElementById('flame-info');
  let data;
  try {
    data = await api('/api/v1/flame', { from: a, to: b });
  } catch (e) {
    if (seq === state.seq) box.replaceChildren(el('p', { class: 'error' }, e.message));
    return;
  }
  if (seq !== state.seq) return;
  box.textContent = '';
  info.textContent = data.samples + ' samples at ' + data.hz + ' Hz';
  if (!data.samples) {
    box.append(el('p', { class: 'hint' }, 'No stack samples in this window.'));
    return;
  }
  state.flame = flamegraph()
    .width(Math.max(300, box.clientWidth))
    .cellHeight(16)
    .transitionDuration(0)
    .minFrameSize(2)
    .selfValue(false);
  const total = data.samples;
  state.flame.setSearchHandler((results, sum) => {
    info.textContent = 'search: ' + sum + ' of ' + total + ' samples (' +
      (100 * sum / Math.max(1, total)).toFixed(1) + '%)';
  });
  d3.select(box).datum(data.tree).call(state.flame);
}

// Shows the selected window on every chart (the one dragged on already shows it).
function markSelection(a, b) {
  for (const u of state.plots) {
    const left = u.valToPos(a, 'x');
    const width = u.valToPos(b, 'x') - left;
    if (Math.abs(u.select.left - left) > 1 || Math.abs(u.select.width - width) > 1) {
      u.setSelect({ left, width, top: 0, height: u.bbox.height / devicePixelRatio }, false);
    }
  }
}

async function selectWindow(a, b) {
  if (!(b > a)) return;
  // Synchronised charts all report the same drag: act on it once.
  if (state.sel && Math.abs(state.sel[0] - a) < 0.5 && Math.abs(state.sel[1] - b) < 0.5) return;
  state.sel = [a, b];
  const seq = ++state.seq;
  markSelection(a, b);
  const sel = document.getElementById('selection');
  sel.textContent = iso(a).slice(11, 19) + ' – ' + iso(b).slice(11, 19) + ' UTC';
  params.set('sel_from', a.toFixed(3));
  params.set('sel_to', b.toFixed(3));
  history.replaceState(null, '', '?' + params.toString());
  document.body.dataset.findings = 'loading';
  document.getElementById('findings-body').textContent = 'diagnosing…';
  document.body.dataset.flame = 'loading';
  // A newer selection made while waiting wins: its answers are the ones shown.
  try {
    const report = await api('/api/v1/findings', { from: a, to: b });
    if (seq !== state.seq) return;
    renderFindings(report);
    document.body.dataset.findings = 'ready';
  } catch (e) {
    if (seq !== state.seq) return;
    document.getElementById('findings-body').replaceChildren(el('p', { class: 'error' }, e.message));
    document.body.dataset.findings = 'error';
  }
  await renderFlame(a, b, seq);
  if (seq === state.seq) document.body.dataset.flame = 'ready';
}

async function show(from, to) {
  state.from = from;
  state.to = to;
  document.getElementById('from').value = iso(from);
  document.getElementById('to').value = iso(to);
  params.set('from', from.toFixed(3));
  params.set('to', to.toFixed(3));
  history.replaceState(null, '', '?' + params.toString());
  setStatus('loading…');
  await drawCharts();
  await loadEvents();
  setStatus(iso(from).replace('T', ' ').slice(0, 19) + ' – ' + iso(to).replace('T', ' ').slice(0, 19) + ' UTC');
  document.body.dataset.timeline = 'ready';
}

async function main() {
  let range;
  try {
    state.charts = await api('/api/v1/charts');
    range = await api('/api/v1/range');
  } catch (e) {
    setStatus(e.message, true);
    return;
  }
  // Which host this is: the fleet's name for it, the one its series and rows carry.
  if (range.host) {
    document.getElementById('host').textContent = range.host + (range.kernel ? ' · ' + range.kernel : '');
    document.title = 'jitterscope · ' + range.host;
  }
  const last = range.to_ns / 1e9;
  const from = parseTime(params.get('from') || '') ?? Math.max(range.from_ns / 1e9 - 1, last - 3600);
  const to = parseTime(params.get('to') || '') ?? last + 1;
  await show(from, to);
  const a = parseTime(params.get('sel_from') || '');
  const b = parseTime(params.get('sel_to') || '');
  if (a !== null && b !== null) await selectWindow(a, b);

  document.getElementById('controls').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = parseTime(document.getElementById('from').value);
    const t = parseTime(document.getElementById('to').value);
    if (f === null || t === null || f >= t) { setStatus('from and to must be times, from before to', true); return; }
    show(f, t);
  });
  document.getElementById('last-hour').addEventListener('click', async () => {
    const r = await api('/api/v1/range');
    show(r.to_ns / 1e9 - 3600, r.to_ns / 1e9 + 1);
  });
  document.getElementById('search').addEventListener('input', (ev) => {
    if (state.flame) state.flame.search(ev.target.value);
  });
  document.getElementById('reset-zoom').addEventListener('click', () => {
    if (state.flame) state.flame.resetZoom();
  });
}

main();
