// jitterscope web UI, part 3 of 6: timelines (uPlot). One function draws every chart of the
// page, the timelines and the evidence alike: axes in the page's zone and the series' unit,
// legends by the names a person knows (the raw series name on hover), the selected window
// and its baseline shaded, the episodes marked, reference lines drawn.
'use strict';

// A nice upper bound for an axis.
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// Draws `data` (an /api/v1/series answer) into `holder`. Options: from, to (the x range),
// band [a, b] (the selected window), base [a, b] (its baseline), marks (episodes: from,
// to), lines [{ value, label }] (in the series' unit), onSelect(a, b), height.
JS.plot = (holder, data, o) => {
  const unit = data.series[0].unit;
  const sc = JS.scaleOf(unit);
  const span = o.to - o.from;
  const series = [{
    label: 'time (' + JS.zoneName() + ')',
    value: (u, v) => (v === null || v === undefined ? '-' : JS.clock(v, span > 86400)),
  }].concat(data.series.map((s, i) => ({
    label: s.label,
    stroke: JS.STROKES[i % JS.STROKES.length],
    dash: JS.DASHES[i % JS.DASHES.length],
    width: 1.5,
    spanGaps: false,
    value: (u, v) => JS.fmt(v === null ? null : v * sc.div, unit),
  })));
  const yRange = (u, min, max) => {
    const hi = Math.max(max, ...(o.lines || []).map((l) => l.value / sc.div));
    // A share is drawn to 100% at most, unless a value is above it (CPU of one core).
    if (unit === 'percent' && hi <= 100) return [0, Math.min(100, niceCeil(hi * 1.05))];
    if (unit === 'percent') return [0, Math.ceil(hi / 10) * 10];
    return [Math.min(0, min), niceCeil(hi * 1.05)];
  };
  const shade = (u, a, b, fill) => {
    const x0 = u.valToPos(Math.max(a, u.scales.x.min), 'x', true);
    const x1 = u.valToPos(Math.min(b, u.scales.x.max), 'x', true);
    if (x1 <= x0) return;
    u.ctx.fillStyle = fill;
    u.ctx.fillRect(x0, u.bbox.top, Math.max(2, x1 - x0), u.bbox.height);
  };
  // Band and marks may be functions: a new selection then needs only a redraw.
  const now = (x) => (typeof x === 'function' ? x() : x);
  const draw = (u) => {
    const ctx = u.ctx;
    ctx.save();
    const base = now(o.base);
    const band = now(o.band);
    if (base) shade(u, base[0], base[1], 'rgba(0, 0, 0, 0.07)');
    if (band) shade(u, band[0], band[1], 'rgba(230, 159, 0, 0.22)');
    // Episodes: a strip along the top each, so overlapping episodes stay readable.
    const h = 5 * devicePixelRatio;
    for (const [i, m] of (now(o.marks) || []).entries()) {
      const a = u.valToPos(m.from - 0.5, 'x', true);
      const b = u.valToPos(m.to + 0.5, 'x', true);
      ctx.fillStyle = m.selected ? '#D55E00' : '#999999';
      ctx.fillRect(a, u.bbox.top + (i % 3) * h, Math.max(2, b - a), h - devicePixelRatio);
    }
    ctx.restore();
  };
  const drawLines = (u) => {
    const ctx = u.ctx;
    ctx.save();
    ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.font = (10 * devicePixelRatio) + 'px system-ui, sans-serif';
    for (const l of o.lines || []) {
      const y = u.valToPos(l.value / sc.div, 'y', true);
      ctx.strokeStyle = l.color || '#444';
      ctx.beginPath();
      ctx.moveTo(u.bbox.left, y);
      ctx.lineTo(u.bbox.left + u.bbox.width, y);
      ctx.stroke();
      ctx.fillStyle = l.color || '#444';
      ctx.fillText(l.label + ' ' + JS.fmt(l.value, unit), u.bbox.left + 4, y - 3);
    }
    ctx.restore();
  };
  const opts = {
    width: o.width,
    height: o.height || 140,
    series,
    tzDate: JS.utc() ? (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC') : undefined,
    scales: { x: { time: true, min: o.from, max: o.to }, y: { range: yRange } },
    axes: [
      { values: (u, splits) => splits.map((s) => JS.clock(s, span > 86400)) },
      {
        size: 70,
        label: JS.unitName(unit),
        labelSize: 14,
        values: (u, splits) => splits.map((v) => JS.fmt(v * sc.div, unit)),
      },
    ],
    cursor: { sync: { key: o.sync || 'jitterscope' }, drag: { x: !!o.onSelect, y: false, setScale: false } },
    hooks: {
      drawClear: [draw],
      draw: [drawLines],
      setSelect: [(u) => {
        if (!o.onSelect || u.select.width < 2) return;
        o.onSelect(u.posToVal(u.select.left, 'x'), u.posToVal(u.select.left + u.select.width, 'x'));
      }],
    },
  };
  const cols = [data.t].concat(data.series.map((s) => s.max.map((v) => (v === null ? null : v / sc.div))));
  const p = new uPlot(opts, cols, holder);
  // The raw series name, for whoever needs it (dump --select, PromQL), on hover.
  const rows = holder.querySelectorAll('.u-legend .u-series');
  data.series.forEach((s, i) => {
    if (rows[i + 1]) {
      rows[i + 1].title = s.name;
      rows[i + 1].dataset.series = s.name;
    }
  });
  return p;
};

// The timelines of the page: every chart of /api/v1/charts over [from, to].
JS.drawTimelines = async (st, onSelect) => {
  const box = document.getElementById('charts');
  box.textContent = '';
  st.plots.forEach((p) => p.destroy());
  st.plots = [];
  const width = Math.max(300, box.clientWidth - 10);
  // All charts are asked for at once: the server reads them in parallel.
  const asked = st.charts.map((c) => JS.source.series(c, st.from, st.to, Math.floor(width / 2))
    .then((data) => ({ data }), (error) => ({ error })));
  for (const [i, c] of st.charts.entries()) {
    const { data, error: e } = await asked[i];
    const unit = data && data.series.length ? data.series[0].unit : c.unit;
    const holder = JS.el('div', { class: 'chart', 'data-chart': c.id, 'data-select': c.select });
    holder.append(JS.el('h3', { title: c.help.join('\n') }, c.name + ' (' + JS.unitName(unit) + ')'));
    box.append(holder);
    if (e) {
      holder.append(JS.el('p', { class: 'error' }, e.message));
      continue;
    }
    if (!data.series.length) {
      holder.append(JS.el('p', { class: 'hint' }, 'not recorded in this range'));
      continue;
    }
    const p = JS.plot(holder, data, {
      from: st.from, to: st.to, width, onSelect,
      band: () => st.sel,
      marks: () => st.events.map((ev) => ({
        from: ev.from_ns / 1e9, to: ev.to_ns / 1e9, selected: ev.id === st.event,
      })),
    });
    p.chartId = c.id;
    st.plots.push(p);
  }
};
