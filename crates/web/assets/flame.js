// jitterscope web UI, part 5 of 6: flame graphs (d3-flame-graph). Plain: what ran in the
// window. Differential (Brendan Gregg's idea): widths are the window's samples, and each frame
// is coloured by how much larger a share of the samples it took than in as long a time just
// before it, so what changed stands out from what merely ran. Below it, the functions whose
// own time grew and shrank most, as a list.
'use strict';

// ColorBrewer's RdBu, a diverging scheme readable with the common colour-vision
// deficiencies: red grew, blue shrank, near white unchanged.
const GREW = [[253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43]];
const SHRANK = [[209, 229, 240], [146, 197, 222], [67, 147, 195], [33, 102, 172]];

function diffColour(delta, maxAbs) {
  if (delta === undefined || delta === null) return 'rgb(230,230,230)';
  const x = Math.min(1, Math.abs(delta) / Math.max(maxAbs, 1e-9));
  if (x < 0.05) return 'rgb(247,247,247)';
  const ramp = delta > 0 ? GREW : SHRANK;
  const c = ramp[Math.min(ramp.length - 1, Math.floor(x * ramp.length))];
  return 'rgb(' + c.join(',') + ')';
}

// Each function's own change: its delta less its children's, summed over every place it
// appears (a recursive function appears at many depths).
function selfChanges(tree) {
  const by = new Map();
  const walk = (n) => {
    const kids = n.children || [];
    const own = (n.delta || 0) - kids.reduce((s, k) => s + (k.delta || 0), 0);
    if (n.name !== 'all') by.set(n.name, (by.get(n.name) || 0) + own);
    kids.forEach(walk);
  };
  walk(tree);
  return [...by.entries()].sort((a, b) => b[1] - a[1]);
}

function maxAbsDelta(n) {
  return Math.max(Math.abs(n.delta || 0), ...(n.children || []).map(maxAbsDelta));
}

// `seq` is the flame graph's own request number (st.flameSeq): a newer request wins.
JS.renderFlame = async (st, a, b, seq) => {
  const box = document.getElementById('flame');
  const info = document.getElementById('flame-info');
  const legend = document.getElementById('flame-legend');
  const changes = document.getElementById('flame-changes');
  const mode = st.flameMode;
  let data;
  try {
    data = await JS.source.flame(a, b, mode);
  } catch (e) {
    if (seq === st.flameSeq) {
      box.replaceChildren(JS.el('p', { class: 'error' }, e.message));
      changes.textContent = '';
    }
    return;
  }
  if (seq !== st.flameSeq) return;
  box.textContent = '';
  changes.textContent = '';
  const span = JS.clock(a) + '–' + JS.clock(b) + ' ' + JS.zoneName();
  info.textContent = data.samples + ' samples at ' + data.hz + ' Hz, ' + span;
  box.dataset.mode = mode;
  if (!data.samples) {
    box.append(JS.el('p', { class: 'hint' }, 'No stack samples in this window.'));
    legend.textContent = '';
    return;
  }
  const diff = mode === 'before' && data.before && data.before.samples > 0;
  legend.textContent = mode === 'before' && !diff
    ? 'Nothing was recorded in the ' + Math.round(b - a) + ' s before this window, so nothing to compare: the graph shows what ran.'
    : diff
    ? 'Red: took a larger share of the samples than in the ' + Math.round(b - a) + ' s before (' +
      data.before.samples + ' samples); blue: a smaller one; the darker, the larger the change.'
    : 'Width: share of the window\'s samples.';
  st.flame = flamegraph()
    .width(Math.max(300, box.clientWidth))
    .cellHeight(16)
    .transitionDuration(0)
    .minFrameSize(2)
    .selfValue(false);
  if (diff) {
    const maxAbs = maxAbsDelta(data.tree);
    st.flame.setColorMapper((d, orig) => (d.highlight ? orig : diffColour(d.data.delta, maxAbs)));
    st.flame.label((d) => d.data.name + ' (' + d.data.value + ' samples, ' +
      ((d.data.delta || 0) >= 0 ? '+' : '') + (100 * (d.data.delta || 0)).toFixed(1) + ' points of the share)');
  }
  const total = data.samples;
  st.flame.setSearchHandler((results, sum) => {
    info.textContent = 'search: ' + sum + ' of ' + total + ' samples (' +
      (100 * sum / Math.max(1, total)).toFixed(1) + '%)';
  });
  d3.select(box).datum(data.tree).call(st.flame);
  if (diff) {
    const ch = selfChanges(data.tree);
    const list = (title, items, cls) => {
      if (!items.length) return;
      const ol = JS.el('ol', { class: cls });
      for (const [name, d] of items) {
        ol.append(JS.el('li', { 'data-frame': name }, name + ' ' + (d >= 0 ? '+' : '') + (100 * d).toFixed(1) + ' points'));
      }
      changes.append(JS.el('div', {}, JS.el('h3', {}, title), ol));
    };
    list('Own time grew most', ch.filter((c) => c[1] > 0.005).slice(0, 8), 'grew');
    list('Own time shrank most', ch.filter((c) => c[1] < -0.005).reverse().slice(0, 8), 'shrank');
  }
};
