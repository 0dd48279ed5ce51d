// jitterscope fleet page: the hosts' episodes, causes and inventory, and one flame graph of
// their episodes' stacks, from /api/v1/fleet (serve --clickhouse). Each section marks itself
// ready (data-*="ready") when drawn, for the tests and for anyone scripting the page.
'use strict';

const params = new URLSearchParams(location.search);
const token = params.get('token');

function setStatus(text, isError) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = isError ? 'error' : '';
}

async function api(path, query) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, v);
  }
  const r = await fetch(u, { headers: token ? { Authorization: 'Bearer ' + token } : {} });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
  return body;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

const list = (v) => (Array.isArray(v) ? v.filter((x) => x !== '' && x !== null).join(', ') : '');

// A table of `rows` with `cols` ([heading, row => cell text]); an empty state says `none`.
function table(cols, rows, none) {
  if (!rows.length) return el('p', { class: 'hint' }, none);
  const head = el('tr', {}, ...cols.map(([h]) => el('th', {}, h)));
  const body = rows.map((r) => el('tr', {}, ...cols.map(([, f]) => el('td', {}, f(r) ?? ''))));
  return el('table', { class: 'grid' }, el('thead', {}, head), el('tbody', {}, ...body));
}

async function section(id, load) {
  const box = document.getElementById(id + '-body') || document.getElementById(id);
  const sec = document.getElementById(id);
  sec.removeAttribute('data-' + id);
  try {
    box.replaceChildren(await load());
    sec.setAttribute('data-' + id, 'ready');
  } catch (e) {
    box.replaceChildren(el('p', { class: 'error' }, e.message));
    sec.setAttribute('data-' + id, 'error');
  }
}

const since = () => document.getElementById('since').value;

// The episode kinds `events --list-kinds` names, offered once seen in the fleet.
const kindsSeen = new Set();

// `serve --fleet-host-url`: how a host's own web UI is reached (null: not said).
let hostUrl = null;

// Where a host's episode opens: its own page at the episode, when the fleet knows the
// address; else nothing.
function onHost(host, id) {
  if (!hostUrl || !id) return null;
  const base = hostUrl.replaceAll('{host}', encodeURIComponent(host)).replace(/\/+$/, '');
  return base + '/?event=' + encodeURIComponent(id);
}

// The report of a host's episode built from the fleet store, for a host out of reach.
function fleetReport(host, w) {
  const u = new URL('/api/v1/fleet/report', location.origin);
  // By id and series: an ns start would not survive a JavaScript number.
  u.searchParams.set('host', host);
  u.searchParams.set('event', w.id);
  u.searchParams.set('series', w.series);
  if (token) u.searchParams.set('token', token);
  return u.toString();
}

function worstCell(r) {
  const w = r.worst;
  if (!w || !w.id) return '';
  const cell = el('span', { class: 'worst', 'data-id': w.id }, w.id + (w.open ? ' (open)' : '') + ' ');
  const there = onHost(r.host, w.id);
  if (there) cell.append(el('a', { href: there, class: 'on-host', rel: 'noopener' }, 'on the host'), ' · ');
  cell.append(el('a', { href: fleetReport(r.host, w), class: 'fleet-report' }, 'report from the fleet'));
  return cell;
}

function loadEpisodes() {
  return section('episodes', async () => {
    const kind = document.getElementById('kind').value;
    const where = document.getElementById('where').value.trim();
    params.set('kind', kind);
    if (!kind) params.delete('kind');
    params.set('where', where);
    if (!where) params.delete('where');
    history.replaceState(null, '', '?' + params.toString());
    const d = await api('/api/v1/fleet/episodes', { since: since(), kind, where });
    for (const h of d.hosts) for (const k of h.kinds || []) kindsSeen.add(k);
    const sel = document.getElementById('kind');
    sel.replaceChildren(el('option', { value: '' }, 'any'),
      ...[...kindsSeen].sort().map((k) => el('option', { value: k }, k)));
    sel.value = kind;
    return table([
      ['host', (r) => r.host],
      ['episodes', (r) => r.episodes],
      ['in episode', (r) => Math.round(r.seconds) + ' s'],
      ['open', (r) => r.open],
      ['kinds', (r) => list(r.kinds)],
      ['longest episode', worstCell],
    ], d.hosts, 'No episodes' + (kind ? ' of kind ' + kind : '') +
      (where ? ' on hosts running ' + where : '') + ' since ' + d.since + '.');
  });
}

function loadCauses() {
  return section('causes', async () => {
    const d = await api('/api/v1/fleet/findings', { since: since() });
    const rules = [...new Set(d.findings.map((f) => f.rule_id))];
    const sel = document.getElementById('flame-rule');
    const keep = sel.value || params.get('rule') || '';
    sel.replaceChildren(el('option', { value: '' }, 'any'),
      ...rules.map((r) => el('option', { value: r }, r)));
    if (rules.includes(keep)) sel.value = keep;
    return table([
      ['host', (r) => r.host],
      ['rule', (r) => r.rule_id],
      ['episodes', (r) => r.episodes],
      ['root cause', (r) => (r.root_cause === 1 ? 'yes' : '')],
      ['culprits', (r) => [list(r.culprits), list(r.containers), list(r.cgroups), list(r.libraries)]
        .filter((x) => x).join('; ')],
      ['example', (r) => r.example_title],
    ], d.findings, 'No findings since ' + d.since + '.');
  });
}

function loadInventory() {
  const q = document.getElementById('conditions').value.trim();
  return section('inventory', async () => {
    // A host sends its inventory when it changes (and every 6 h): look back at least a day.
    const d = await api('/api/v1/fleet/inventory', { since: since() === '7d' ? '7d' : '1d', q });
    const note = el('p', { class: 'hint' }, d.about_processes
      ? d.processes + ' processes in ' + d.groups.length + ' groups on ' + d.hosts.length +
        ' hosts match (of ' + d.hosts_with_inventory + ' hosts with an inventory)'
      : d.hosts.length + ' hosts with an inventory');
    if (!d.about_processes) {
      return el('div', {}, table([
        ['host', (r) => r.host],
        ['kernel', (r) => r.kernel],
        ['cgroups', (r) => r.cgroup_layout],
        ['CPUs', (r) => r.cpus],
        ['memory', (r) => (r.memory_bytes / 2 ** 30).toFixed(1) + ' GiB'],
        ['processes', (r) => r.processes],
        ['OS', (r) => r.os],
      ], d.hosts, 'No host has sent an inventory.'), note);
    }
    const libs = (r) => ['jemalloc', 'tcmalloc', 'mimalloc', 'softokn', 'python', 'glibc']
      .filter((l) => r[l] !== null && r[l] !== undefined).map((l) => (l + ' ' + r[l]).trim()).join(', ');
    const settings = (r) => (r.env_keys || []).map((k, i) => k + '=' + r.env_values[i]).join(' ');
    return el('div', {}, table([
      ['host', (r) => r.host],
      ['processes', (r) => r.processes],
      ['command', (r) => r.comm],
      ['container or cgroup', (r) => r.container || r.cgroup],
      ['libraries', libs],
      ['settings', settings],
      ['pids', (r) => list(r.pids)],
    ], d.groups, 'No process matches.'), note);
  });
}

function loadFlame() {
  const info = document.getElementById('flame-info');
  return section('fleet-flame', async () => {
    const rule = document.getElementById('flame-rule').value;
    const d = await api('/api/v1/fleet/flame', { since: since(), rule });
    info.textContent = d.samples + ' samples from ' + d.episodes + ' episodes on ' + d.hosts + ' hosts';
    if (!d.samples) return el('p', { class: 'hint' }, 'No stacks of episodes in this window.');
    const box = el('div', {});
    const width = document.getElementById('fleet-flame').clientWidth || 1200;
    const chart = flamegraph().width(Math.max(300, width)).cellHeight(16)
      .transitionDuration(0).minFrameSize(2).selfValue(false);
    d3.select(box).datum(d.tree).call(chart);
    return box;
  });
}

async function showAll() {
  setStatus('loading…');
  hostUrl = await api('/api/v1/fleet/about').then((a) => a.host_url, () => null);
  await Promise.all([loadEpisodes(), loadCauses().then(loadFlame), loadInventory()]);
  const errors = document.querySelectorAll('.error:not(#status)').length;
  setStatus(errors ? errors + ' sections failed' : 'up to date', errors > 0);
}

function main() {
  if (params.get('since')) document.getElementById('since').value = params.get('since');
  if (params.get('q')) document.getElementById('conditions').value = params.get('q');
  if (params.get('where')) document.getElementById('where').value = params.get('where');
  if (params.get('kind')) {
    // Offered before the first answer, so the page opens filtered.
    kindsSeen.add(params.get('kind'));
    const sel = document.getElementById('kind');
    sel.append(el('option', { value: params.get('kind') }, params.get('kind')));
    sel.value = params.get('kind');
  }
  document.getElementById('kind').addEventListener('change', loadEpisodes);
  document.getElementById('where-form').addEventListener('submit', (e) => { e.preventDefault(); loadEpisodes(); });
  document.getElementById('controls').addEventListener('submit', (e) => { e.preventDefault(); showAll(); });
  document.getElementById('inventory-form').addEventListener('submit', (e) => { e.preventDefault(); loadInventory(); });
  for (const b of document.querySelectorAll('.preset')) {
    b.addEventListener('click', () => { document.getElementById('conditions').value = b.dataset.q; loadInventory(); });
  }
  document.getElementById('flame-rule').addEventListener('change', loadFlame);
  showAll();
}

main();
