// jitterscope web UI, part 2 of 6: where the page's data comes from. Live, from the server's
// /api/v1; in an incident report (`jitterscope report`), from the answers embedded in the
// file, so the report opens offline and shows what the live page showed.
'use strict';

JS.report = window.JITTERSCOPE_REPORT || null;

async function api(path, query) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null) u.searchParams.set(k, v);
  }
  const token = JS.params.get('token');
  const r = await fetch(u, { headers: token ? { Authorization: 'Bearer ' + token } : {} });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
  return body;
}

const live = {
  live: true,
  range: () => api('/api/v1/range'),
  charts: () => api('/api/v1/charts'),
  series: (chart, from, to, points) => api('/api/v1/series', {
    select: chart.select, from, to, points, top: chart.top,
  }),
  evidence: (series, from, to, points) => api('/api/v1/series', { select: series, from, to, points }),
  events: (from, to) => api('/api/v1/events', { from, to }),
  findings: (from, to) => api('/api/v1/findings', { from, to }),
  table: (of, from, to, focus) => api('/api/v1/table', { of, from, to, focus }),
  flame: (from, to, mode) => api('/api/v1/flame', { from, to, compare: mode === 'before' ? 'before' : null }),
  reportUrl: (from, to, event) => {
    const u = new URL('/api/v1/report', location.origin);
    if (event) u.searchParams.set('event', event);
    else { u.searchParams.set('from', from.toFixed(3)); u.searchParams.set('to', to.toFixed(3)); }
    const token = JS.params.get('token');
    if (token) u.searchParams.set('token', token);
    return u.toString();
  },
};

// A report holds one window's answers: asking it of another window says so.
function offline(R) {
  const same = (from, to) => Math.abs(from - R.window.from) < 1 && Math.abs(to - R.window.to) < 1;
  const only = (what) => new Error('this offline report holds ' + what + ' of its own window only');
  const got = (v) => (v && v.error ? Promise.reject(new Error(v.error)) : Promise.resolve(v));
  return {
    live: false,
    range: () => got(R.range),
    charts: () => got(R.charts),
    series: (chart) => got(R.series[chart.id] || { error: 'not in this report' }),
    evidence: (series) => got(R.evidence[series] || { error: R.missing || 'not in this report' }),
    events: () => got(R.events),
    findings: (from, to) => (same(from, to) ? got(R.findings) : Promise.reject(only('the findings'))),
    table: (of, from, to, focus) => (same(from, to) && R.tables[of + '|' + focus]
      ? got(R.tables[of + '|' + focus]) : Promise.reject(only('the culprits\' tables'))),
    flame: (from, to, mode) => {
      const f = R.flame[mode];
      if (f && f.error) return got(f);
      const fits = f && Math.abs(from - f.from_ns / 1e9) < 1 && Math.abs(to - f.to_ns / 1e9) < 1;
      return fits ? got(f) : Promise.reject(only('the flame graphs'));
    },
    reportUrl: () => null,
  };
}

JS.source = JS.report ? offline(JS.report) : live;
