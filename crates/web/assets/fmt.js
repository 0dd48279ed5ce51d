// jitterscope web UI, part 1 of 6: the shared namespace, the URL's state, and how times,
// values and names are written. Every time on the page (axes, lists, headings) goes through
// clock(), in the one zone the URL chooses, so an axis and a list can never disagree.
'use strict';

const JS = {};

JS.params = new URLSearchParams(location.search);

// The URL holds the view's whole state; every change replaces it, so a copied link opens the
// same view.
JS.setParams = (kv) => {
  for (const [k, v] of Object.entries(kv)) {
    if (v === null || v === undefined || v === '') JS.params.delete(k); else JS.params.set(k, v);
  }
  if (!JS.report) history.replaceState(null, '', '?' + JS.params.toString());
};

JS.utc = () => JS.params.get('tz') !== 'local';

JS.zoneName = () => {
  if (JS.utc()) return 'UTC';
  const off = -new Date().getTimezoneOffset();
  const sign = off < 0 ? '-' : '+';
  const h = String(Math.floor(Math.abs(off) / 60)).padStart(2, '0');
  const m = String(Math.abs(off) % 60).padStart(2, '0');
  return 'local (UTC' + sign + h + ':' + m + ')';
};

const pad = (n, w = 2) => String(n).padStart(w, '0');

// Parts of a time (seconds since the epoch) in the chosen zone.
function parts(s) {
  const d = new Date(s * 1000);
  const u = JS.utc();
  return {
    y: u ? d.getUTCFullYear() : d.getFullYear(),
    mo: (u ? d.getUTCMonth() : d.getMonth()) + 1,
    d: u ? d.getUTCDate() : d.getDate(),
    h: u ? d.getUTCHours() : d.getHours(),
    mi: u ? d.getUTCMinutes() : d.getMinutes(),
    s: u ? d.getUTCSeconds() : d.getSeconds(),
  };
}

// 24-hour clock time; with the date when `withDate`.
JS.clock = (s, withDate) => {
  const p = parts(s);
  const t = pad(p.h) + ':' + pad(p.mi) + ':' + pad(p.s);
  return withDate ? p.y + '-' + pad(p.mo) + '-' + pad(p.d) + ' ' + t : t;
};

// For the from/to inputs: a time a person can edit and parseTime reads back.
JS.inputTime = (s) => {
  if (JS.utc()) return new Date(Math.round(s) * 1000).toISOString().replace('.000', '');
  return JS.clock(Math.round(s), true).replace(' ', 'T');
};

// Epoch seconds, or an ISO time (without a zone: the chosen zone).
JS.parseTime = (v) => {
  const n = Number(v);
  if (v !== '' && !Number.isNaN(n)) return n;
  let t = v;
  if (JS.utc() && /^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?$/.test(v)) t = v.replace(' ', 'T') + 'Z';
  const ms = Date.parse(t);
  return Number.isNaN(ms) ? null : ms / 1000;
};

// How a unit is drawn: values are divided by `div` and written with `sym`; `name` is the
// unit's name for an axis or a heading. Latencies recorded in µs or ns are drawn in ms: a p99
// of 83,120 µs reads better as 83 ms.
const UNITS = {
  percent: { div: 1, sym: '%', name: '%' },
  per_second: { div: 1, sym: '/s', name: '/s' },
  bytes: { div: 1, sym: '', name: 'bytes' },
  bytes_per_second: { div: 1, sym: '/s', name: 'bytes/s' },
  pages: { div: 1, sym: ' pages', name: 'pages' },
  count: { div: 1, sym: '', name: 'count' },
  milliseconds: { div: 1, sym: ' ms', name: 'ms' },
  microseconds: { div: 1000, sym: ' ms', name: 'ms' },
  nanoseconds: { div: 1e6, sym: ' ms', name: 'ms' },
  seconds: { div: 1, sym: ' s', name: 's' },
  ratio: { div: 1, sym: '', name: 'ratio' },
  cores: { div: 1, sym: ' cores', name: 'cores' },
  milliseconds_per_second: { div: 1, sym: ' ms/s', name: 'ms/s' },
};
JS.scaleOf = (unit) => UNITS[unit] || { div: 1, sym: '', name: unit || '' };
JS.unitName = (unit) => JS.scaleOf(unit).name;

function number(v) {
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString('en');
  if (a >= 100 || Number.isInteger(v)) return String(Math.round(v));
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

function bytes(v) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(Math.abs(v) >= 100 ? 0 : 1) : String(Math.round(v))) + ' ' + u[i];
}

// A value with its unit, as a person reads it.
JS.fmt = (v, unit) => {
  if (v === null || v === undefined || Number.isNaN(v)) return '-';
  if (unit === 'bytes') return bytes(v);
  if (unit === 'bytes_per_second') return bytes(v) + '/s';
  const sc = JS.scaleOf(unit);
  return number(v / sc.div) + sc.sym;
};

JS.el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const k of kids) {
    if (k !== null && k !== undefined) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
};

JS.svg = (tag, attrs, ...kids) => {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};

// Okabe and Ito's palette: eight colours told apart with every common colour-vision
// deficiency. Lines also differ by dash, so meaning never rests on colour alone.
JS.STROKES = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000'];
JS.DASHES = [[], [6, 3], [2, 2], [10, 3, 2, 3], [4, 4], [1, 3], [8, 2]];

JS.setStatus = (text, isError) => {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = isError ? 'error' : '';
};

// A person's name for a culprit: the process as `comm (pid)`, then its container or unit,
// else its cgroup.
JS.culprit = (c) => [
  c.comm && (c.comm + (c.pid ? ' (' + c.pid + ')' : '')),
  c.container || c.cgroup,
  c.library && (c.library + (c.library_version ? ' ' + c.library_version : '')),
].filter(Boolean).join(', ');
