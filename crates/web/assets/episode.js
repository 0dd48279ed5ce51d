// jitterscope web UI, part 4 of 6: a window's diagnosis. The cause chain as a graph from root
// to consequences, each finding with its culprit, evidence and what to change, and the
// evidence as charts over the window with the baseline before it shaded.
'use strict';

// Depth of each linked finding: 0 for a root (caused by nothing in the report), else one more
// than its deepest cause. Numbers are the report's (1 is the first finding).
function depths(findings) {
  const d = new Map();
  const visit = (n, seen) => {
    if (d.has(n)) return d.get(n);
    if (seen.has(n)) return 0;
    seen.add(n);
    const f = findings[n - 1];
    const v = f.caused_by.length ? 1 + Math.max(...f.caused_by.map((l) => visit(l.finding, seen))) : 0;
    d.set(n, v);
    return v;
  };
  findings.forEach((f, i) => { if (f.causes.length || f.caused_by.length) visit(i + 1, new Set()); });
  return d;
}

// The chain as an SVG graph, roots on the left, and the same links as text for a screen
// reader and a copy into a ticket.
function renderChain(findings) {
  const box = document.getElementById('chain');
  box.textContent = '';
  const d = depths(findings);
  if (!d.size) return;
  const cols = new Map();
  for (const [n, depth] of d) {
    if (!cols.has(depth)) cols.set(depth, []);
    cols.get(depth).push(n);
  }
  const W = 200, H = 46, GX = 44, GY = 12;
  const ncol = Math.max(...cols.keys()) + 1;
  const nrow = Math.max(...[...cols.values()].map((c) => c.length));
  const pos = new Map();
  for (const [depth, ns] of cols) ns.forEach((n, row) => pos.set(n, { x: depth * (W + GX), y: row * (H + GY) }));
  const gw = ncol * (W + GX) - GX + 2, gh = nrow * (H + GY) - GY + 2;
  // Scaled to the panel's width: a long chain shrinks rather than overflowing it.
  const svg = JS.svg('svg', {
    viewBox: '0 0 ' + gw + ' ' + gh, width: '100%', style: 'max-width: ' + gw + 'px', class: 'chain-graph',
    role: 'img', 'aria-label': 'cause chain',
  });
  svg.append(JS.svg('defs', {}, JS.svg('marker', {
    id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse',
  }, JS.svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#333' }))));
  const text = JS.el('ol', { class: 'chain-text' });
  for (const [n] of d) {
    const f = findings[n - 1];
    for (const l of f.causes) {
      const a = pos.get(n), b = pos.get(l.finding);
      if (!a || !b) continue;
      svg.append(JS.svg('line', {
        x1: a.x + W + 1, y1: a.y + H / 2 + 1, x2: b.x + 1, y2: b.y + H / 2 + 1,
        stroke: '#333', 'stroke-width': 1.5, 'marker-end': 'url(#arrow)',
      }, JS.svg('title', {}, l.reason)));
      text.append(JS.el('li', {}, f.rule_id + ' → ' + l.rule_id + ': ' + l.reason));
    }
  }
  for (const [n, depth] of d) {
    const f = findings[n - 1];
    const p = pos.get(n);
    const g = JS.svg('g', {
      class: 'chain-node', 'data-rule': f.rule_id, 'data-depth': depth, tabindex: 0,
      transform: 'translate(' + (p.x + 1) + ',' + (p.y + 1) + ')',
    });
    g.append(JS.svg('rect', { width: W, height: H, rx: 4, fill: depth ? '#fff' : '#fbe3c9', stroke: '#333' }));
    g.append(JS.svg('text', { x: 6, y: 17, 'font-weight': 600 }, (depth ? 'then ' : 'root: ') + f.rule_id));
    g.append(JS.svg('text', { x: 6, y: 34 }, JS.culprit(f.culprit).slice(0, 34)));
    g.append(JS.svg('title', {}, f.title));
    const go = () => document.getElementById('finding-' + n).scrollIntoView();
    g.addEventListener('click', go);
    g.addEventListener('keydown', (k) => { if (k.key === 'Enter' || k.key === ' ') { k.preventDefault(); go(); } });
    svg.append(g);
  }
  box.append(JS.el('h3', {}, 'Cause chain'), svg, text);
}

// Which table a culprit is a row of: its process, else its cgroup.
JS.culpritKey = (c) => {
  if (c.pid) return ['processes', String(c.pid)];
  if (c.cgroup) return ['cgroups', c.cgroup];
  return null;
};

// The culprit's row among the processes (or cgroups) of the window, the busiest first.
JS.culpritTable = async (c, holder, report) => {
  const k = JS.culpritKey(c);
  if (!k) return;
  const [a, b] = JS.state.sel;
  let t;
  try {
    t = await JS.source.table(k[0], a, b, k[1]);
  } catch (e) {
    holder.append(JS.el('p', { class: 'hint' }, e.message));
    return;
  }
  const tab = JS.el('table', { 'data-of': t.of });
  tab.append(JS.el('tr', {}, JS.el('th', {}, '#'), JS.el('th', {}, k[0] === 'processes' ? 'process' : 'cgroup'),
    ...t.columns.map((col) => JS.el('th', { title: col.help }, col.name))));
  for (const r of t.rows) {
    const who = r.name || r.key.join(' ');
    tab.append(JS.el('tr', { class: r.focus ? 'culprit-row' : null, 'aria-current': r.focus ? 'true' : null },
      JS.el('td', {}, r.rank), JS.el('td', { title: r.key.join(' ') }, who),
      ...r.values.map((v, i) => JS.el('td', {}, JS.fmt(v, t.columns[i].unit)))));
  }
  const d = JS.el('details', { open: report.findings[0] && report.findings[0].culprit === c ? '' : null },
    JS.el('summary', {}, 'The culprit among the ' + t.rows_total + ' ' + t.of + ' of the window'), tab);
  holder.append(d);
};

JS.renderFindings = (report) => {
  renderChain(report.findings);
  const body = document.getElementById('findings-body');
  body.textContent = '';
  if (report.holes) body.append(JS.el('p', { class: 'hint' }, 'Part of the window was not recorded; confidences are lowered.'));
  for (const n of report.notes || []) body.append(JS.el('p', { class: 'hint note' }, n));
  if (!report.findings.length) {
    // A report from a fleet store has no sample count: its notes say why nothing is listed.
    if (report.samples !== null && report.samples !== undefined) {
      body.append(JS.el('p', {}, 'No finding: no rule matched this window (' + report.samples + ' samples).'));
    }
    return;
  }
  report.findings.forEach((f, i) => {
    const box = JS.el('div', { class: 'finding', 'data-rule': f.rule_id, id: 'finding-' + (i + 1) });
    box.append(JS.el('h3', {},
      JS.el('span', { class: 'kind' }, (f.mechanism ? 'mechanism ' : 'resource ') + Math.round(f.confidence * 100) + '% '),
      f.title));
    const who = JS.culprit(f.culprit);
    if (who) box.append(JS.el('p', { class: 'culprit', title: f.culprit.cgroup || '' }, 'Culprit: ' + who));
    const table = JS.el('div', { class: 'culprit-table' });
    box.append(table);
    JS.culpritTable(f.culprit, table, report);
    for (const l of f.caused_by) box.append(JS.el('p', { class: 'link' }, '← set off by ' + l.rule_id + ': ' + l.reason));
    const t = JS.el('table', {}, JS.el('tr', {}, JS.el('th', {}, 'evidence'), JS.el('th', {}, 'window'), JS.el('th', {}, 'baseline')));
    for (const ev of f.evidence) {
      t.append(JS.el('tr', {},
        JS.el('td', { title: ev.series || ev.signal }, ev.note),
        JS.el('td', {}, JS.fmt(ev.value, ev.unit) + ' ' + ev.stat),
        JS.el('td', {}, ev.baseline === null ? '-' : JS.fmt(ev.baseline, ev.unit))));
    }
    box.append(t);
    if (f.moved_first.length > 1) {
      box.append(JS.el('p', {}, 'Moved first: ' + f.moved_first.map((m) => m.signal + ' +' + m.lag_s + ' s').join(', ')));
    }
    const ul = JS.el('ul', { class: 'remediation' });
    f.remediation.forEach((r) => ul.append(JS.el('li', {}, r)));
    box.append(JS.el('p', {}, 'What to change:'), ul);
    f.notes.forEach((n) => box.append(JS.el('p', { class: 'hint' }, n)));
    body.append(box);
  });
};

// The evidence of each finding over [from, to], the window shaded and its baseline before it.
JS.renderEvidence = async (report, st, seq) => {
  const box = document.getElementById('evidence');
  box.textContent = '';
  const width = Math.max(300, box.clientWidth - 10);
  const ev = st.events.find((e) => e.id === st.event);
  const [a, b] = st.sel;
  const lookback = Math.min(600, Math.max(60, 3 * (b - a)));
  const from = Math.max(st.range.from_ns / 1e9 - 1, a - lookback);
  const to = Math.min(st.range.to_ns / 1e9 + 1, b + Math.max(10, (b - a) / 2));
  const seen = new Set();
  let drawn = 0;
  for (const f of report.findings) {
    for (const e of f.evidence) {
      if (!e.series || seen.has(e.series)) continue;
      seen.add(e.series);
      let data;
      try {
        data = await JS.source.evidence(e.series, from, to, Math.floor(width / 3));
      } catch (err) {
        continue;
      }
      if (seq !== st.seq) return;
      if (!data.series.length) continue;
      const lines = [];
      if (e.baseline !== null && e.stat !== 'total' && e.stat !== 'growth') lines.push({ value: e.baseline, label: 'baseline median', color: '#555' });
      if (ev && ev.series === e.series) lines.push({ value: ev.threshold, label: 'threshold', color: '#D55E00' });
      const holder = JS.el('div', { class: 'chart evidence', 'data-series': e.series, 'data-rule': f.rule_id });
      holder.append(JS.el('h3', { title: e.series }, e.note + ' (' + JS.unitName(data.series[0].unit) + ')'));
      box.append(holder);
      JS.plot(holder, data, {
        from, to, width, height: 110, band: [a, b], base: [Math.max(from, a - lookback), a], lines, sync: 'evidence',
      });
      drawn++;
    }
  }
  if (!drawn) {
    const missing = JS.report && JS.report.missing;
    box.append(JS.el('p', { class: 'hint' }, missing ? 'The evidence series ' + missing : 'No recorded series behind these findings.'));
  }
};
