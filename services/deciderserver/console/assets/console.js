// sluice console: plain JavaScript, no build step, nothing fetched but this decider's own
// /ui/api/ and /v1/ endpoints (docs/console.md). The viewer token is kept in sessionStorage
// (this tab only); the admin token only in a variable of this page, never stored.
'use strict';

const state = {
  token: sessionStorage.getItem('sluice.viewerToken') || '',
  adminToken: '',
  page: '',
  timers: [],
  firstRender: {},
};
window.__sluiceConsole = state;

// ---- helpers ----------------------------------------------------------------------------
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const $ = (id) => document.getElementById(id);
const fmt = (n) => (n === undefined || n === null ? '—' : Number(n).toLocaleString('en-US'));
const pct = (x) => (isFinite(x) ? (100 * x).toFixed(1) + '%' : '—');
function ago(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return Math.round(ms / 60000) + ' min';
}
// dur formats a protobuf JSON duration ("0.318369577s") in ms.
function dur(d) {
  const s = parseFloat(d || '0');
  return isFinite(s) ? (s < 1 ? (s * 1000).toFixed(s < 0.01 ? 2 : 0) + ' ms' : s.toFixed(2) + ' s') : String(d);
}
function authHeaders(token) {
  const t = token === undefined ? state.token : token;
  return t ? { Authorization: 'Bearer ' + t } : {};
}
class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || ('HTTP ' + status));
    this.status = status;
    this.reason = body && (body.reason || ((body.details || []).find((d) => d.reason) || {}).reason);
  }
}
async function api(path, opts) {
  opts = opts || {};
  const resp = await fetch(path, {
    method: opts.method || 'GET',
    headers: Object.assign({ Accept: 'application/json' }, opts.body ? { 'Content-Type': 'application/json' } : {}, authHeaders(opts.token)),
    body: opts.body ? JSON.stringify(opts.body) : undefined,
  });
  const text = await resp.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = { message: text }; }
  if (!resp.ok) throw new APIError(resp.status, body);
  return body;
}
function banner(msg) {
  const b = $('banner');
  if (!msg) { b.hidden = true; b.textContent = ''; return; }
  b.hidden = false;
  b.textContent = msg;
}
function showError(err) {
  if (err instanceof APIError && err.status === 401) {
    banner('This decider needs a viewer token: enter it at the top right. (' + err.message + ')');
  } else {
    banner(String(err.message || err));
  }
}
function rendered(page) {
  if (state.firstRender[page] === undefined) state.firstRender[page] = performance.now();
  document.body.dataset.rendered = page;
}
function every(ms, fn) { state.timers.push(setInterval(fn, ms)); }

// ---- virtual table ------------------------------------------------------------------------
// Rows are absolutely positioned in a spacer as tall as all rows; only the rows in view (plus
// a margin) exist in the DOM. fetchRows(first, count) may be async (server-side paging).
const ROW_H = 24;
class VirtualTable {
  constructor(root, cols, renderRow) {
    this.body = root.querySelector('.vt-body');
    this.spacer = root.querySelector('.vt-spacer');
    this.cols = cols;
    this.renderRow = renderRow;
    this.total = 0;
    this.rows = new Map();
    this.source = null;
    this.pending = false;
    this.body.addEventListener('scroll', () => this.schedule());
  }
  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }
  setTotal(n) { this.total = n; this.spacer.style.height = (n * ROW_H) + 'px'; }
  range() {
    const first = Math.max(0, Math.floor(this.body.scrollTop / ROW_H) - 10);
    const count = Math.ceil(this.body.clientHeight / ROW_H) + 20;
    return [first, Math.min(count, Math.max(0, this.total - first))];
  }
  // show renders rows [first, first+items.length) from items.
  show(first, items) {
    for (const el of this.rows.values()) el.remove();
    this.rows.clear();
    items.forEach((item, i) => {
      const el = this.renderRow(item, first + i);
      el.classList.add('vt-row', this.cols);
      el.style.top = ((first + i) * ROW_H) + 'px';
      this.spacer.append(el);
      this.rows.set(first + i, el);
    });
  }
  draw() { if (this.source) this.source(...this.range()); }
}

// ---- charts ---------------------------------------------------------------------------------
function chartFrame(canvas) {
  const ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.font = '11px sans-serif';
  return { ctx, w: canvas.width, h: canvas.height, l: 40, r: 8, t: 8, b: 20 };
}
function axes(f, maxY, yLabel) {
  const { ctx, w, h, l, r, t, b } = f;
  ctx.strokeStyle = '#dde1e7';
  ctx.fillStyle = '#6b7480';
  ctx.beginPath();
  for (let i = 0; i <= 4; i++) {
    const y = t + (h - t - b) * i / 4;
    ctx.moveTo(l, y); ctx.lineTo(w - r, y);
    ctx.fillText(yLabel(maxY * (4 - i) / 4), 2, y + 4);
  }
  ctx.stroke();
}
function lineChart(canvas, values, maxY, yLabel, color) {
  const f = chartFrame(canvas);
  axes(f, maxY, yLabel);
  const { ctx, w, h, l, r, t, b } = f;
  const n = values.length;
  ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
  let started = false;
  values.forEach((v, i) => {
    if (v === null) { started = false; return; }
    const x = l + (w - l - r) * i / Math.max(1, n - 1);
    const y = t + (h - t - b) * (1 - v / maxY);
    if (!started) { ctx.moveTo(x, y); started = true; } else ctx.lineTo(x, y);
  });
  ctx.stroke(); ctx.lineWidth = 1;
  ctx.fillStyle = color;
  values.forEach((v, i) => {
    if (v === null) return;
    ctx.fillRect(l + (w - l - r) * i / Math.max(1, n - 1) - 2, t + (h - t - b) * (1 - v / maxY) - 2, 4, 4);
  });
  ctx.fillStyle = '#6b7480';
  ctx.fillText('-' + Math.round(n * (canvas.dataset.bin || 5) / 60) + ' min', l, h - 4);
  ctx.fillText('now', w - r - 20, h - 4);
}
function stackedBars(canvas, series, colors, yLabel) {
  const f = chartFrame(canvas);
  const n = series[0].length;
  let maxY = 1;
  for (let i = 0; i < n; i++) maxY = Math.max(maxY, series.reduce((s, a) => s + a[i], 0));
  axes(f, maxY, yLabel);
  const { ctx, w, h, l, r, t, b } = f;
  const bw = (w - l - r) / n;
  for (let i = 0; i < n; i++) {
    let y0 = h - b;
    series.forEach((s, k) => {
      const bh = (h - t - b) * s[i] / maxY;
      ctx.fillStyle = colors[k];
      ctx.fillRect(l + i * bw, y0 - bh, Math.max(1, bw - 1), bh);
      y0 -= bh;
    });
  }
}
function histogram(canvas, counts, labels) {
  const f = chartFrame(canvas);
  const maxY = Math.max(1, ...counts);
  axes(f, maxY, (v) => Math.round(v));
  const { ctx, w, h, l, r, t, b } = f;
  const bw = (w - l - r) / counts.length;
  counts.forEach((c, i) => {
    const bh = (h - t - b) * c / maxY;
    ctx.fillStyle = i >= 8 ? '#c0392b' : '#2b6cb0';
    ctx.fillRect(l + i * bw + 2, h - b - bh, bw - 4, bh);
    ctx.fillStyle = '#6b7480';
    ctx.fillText(labels[i], l + i * bw + 4, h - 6);
  });
}
function card(label, value, cls) { return h('div', { class: 'card ' + (cls || '') }, h('b', { text: value }), label); }

// ---- Fleet ------------------------------------------------------------------------------------
const fleet = { sort: 'id', table: null, seq: 0, selected: '' };
function fleetQuery(first, count) {
  const p = new URLSearchParams({ offset: first, limit: count, sort: fleet.sort });
  for (const [k, id] of [['q', 'fleet-q'], ['role', 'fleet-role'], ['health', 'fleet-health']]) {
    if ($(id).value) p.set(k, $(id).value);
  }
  return '/ui/api/fleet?' + p;
}
// rankBars draws one small bar per data-parallel rank (height: the rank's KV usage; amber: its
// report is stale; hollow: not reported), so a skewed or silent rank shows in the table.
function rankBars(e) {
  const rl = e.rank_load || [];
  const shown = rl.slice(0, 16);
  const bars = h('span', { class: 'ranks' }, shown.map((r) => {
    const b = h('i', { class: !r.reported ? 'missing' : r.fresh ? '' : 'stale', 'data-rank': r.rank });
    b.style.height = Math.max(1, Math.round(14 * Math.min(1, r.kv_usage || 0))) + 'px';
    return b;
  }), rl.length > shown.length ? '+' + (rl.length - shown.length) : '');
  const reported = rl.filter((r) => r.reported && r.fresh).length;
  const size = e.dp_size > 1 ? e.dp_size : rl.length || 1;
  return [bars, rl.length ? reported + '/' + size : '—'];
}
function rankLine(r) {
  if (!r.reported) return 'rank ' + r.rank + ': not reported';
  return 'rank ' + r.rank + ': ' + fmt(r.running || 0) + ' running, ' + fmt(r.waiting || 0) + ' waiting, KV ' + pct(r.kv_usage || 0) +
    ', ' + ago(r.age_ms || 0) + ' ago' + (r.fresh ? '' : ' (stale)');
}
function fleetRow(e) {
  const health = e.drained ? h('span', { class: 'warn', text: 'drained' })
    : e.healthy ? h('span', { class: 'ok', text: 'healthy' })
      : h('span', { class: 'bad', text: 'unhealthy: ' + (e.health_reason || '') });
  const kv = h('span', { class: 'bar' }, h('i'));
  kv.firstChild.style.width = Math.round(60 * Math.min(1, e.kv_usage || 0)) + 'px';
  const el = h('div', { 'data-engine': e.id, title: e.url, onclick: () => selectEngine(e.id) },
    h('span', { text: e.id }), h('span', { text: e.role }), h('span', { text: (e.models || []).join(', ') }),
    h('span', { title: e.health_reason || '' }, health),
    h('span', { text: (e.probe_ok ? 'probe ok' : 'probe failing') + ' / ' + e.breaker }),
    h('span', { text: e.load_known ? fmt(e.running) : '—' }), h('span', { text: e.load_known ? fmt(e.waiting) : '—' }),
    h('span', {}, e.load_known ? [kv, pct(e.kv_usage)] : 'unknown'),
    h('span', { class: 'rank-cell', title: (e.rank_load || []).map(rankLine).join('\n') }, rankBars(e)),
    h('span', { text: e.load_known ? ago(e.load_age_ms) : '—' }),
    h('span', { class: 'blocks', text: e.kv_blocks === undefined ? '—' : fmt(e.kv_blocks) }), h('span', { text: fmt(e.inflight) }),
    h('span', { class: e.uncertain ? 'warn' : '', text: e.uncertain ? 'uncertain' : 'ok' }));
  if (e.id === fleet.selected) el.classList.add('sel');
  return el;
}
function selectEngine(id) {
  fleet.selected = id;
  fleet.table.draw();
}
// fleetDetail shows the selected engine's ranks: the row from the page in view, or fetched
// alone (id=) when it has scrolled out.
async function fleetDetail(rows) {
  const id = fleet.selected;
  if (!id) return;
  let e = rows.find((r) => r.id === id);
  if (!e) {
    const one = await api('/ui/api/fleet?' + new URLSearchParams({ id: id, limit: 1 }));
    if (id !== fleet.selected) return;
    e = one.rows[0];
    if (!e) { // the engine left the registry
      fleet.selected = '';
      $('fleet-detail').hidden = true;
      return;
    }
  }
  const num = (v) => fmt(v || 0);
  $('fleet-detail').hidden = false;
  $('fleet-detail').replaceChildren(
    h('h3', { text: e.id + ': load per rank' + (e.load_known ? '' : ' (summed load unknown: every rank must have a fresh report)') }),
    h('div', { class: 'meta' }, h('span', { text: 'dp size ' + (e.dp_size || 1) }),
      h('span', { text: 'KV blocks indexed ' + (e.kv_blocks === undefined ? '— (no KV ingestion)' : fmt(e.kv_blocks)) }),
      h('span', { text: 'in flight ' + fmt(e.inflight) })),
    h('table', { class: 'plain', id: 'rank-table' },
      h('tr', {}, ...['rank', 'report', 'age', 'running', 'waiting', 'KV used', 'KV capacity', 'KV usage', 'uncached waiting', 'prefill tok/s']
        .map((t) => h('th', { text: t }))),
      (e.rank_load || []).map((r) => h('tr', { 'data-rank': r.rank },
        h('td', { text: r.rank }),
        h('td', { class: !r.reported ? 'bad' : r.fresh ? 'ok' : 'warn', text: !r.reported ? 'none yet' : r.fresh ? 'fresh' : 'stale' }),
        h('td', { text: r.reported ? ago(r.age_ms || 0) : '—' }),
        h('td', { text: num(r.running) }), h('td', { text: num(r.waiting) }),
        h('td', { text: num(r.kv_used_tokens) }), h('td', { text: num(r.kv_capacity_tokens) }), h('td', { text: pct(r.kv_usage || 0) }),
        h('td', { text: r.waiting_uncached_tokens ? fmt(r.waiting_uncached_tokens) : '—' }),
        h('td', { text: r.prefill_rate ? fmt(Math.round(r.prefill_rate)) : '—' })))));
}
async function fleetLoad(first, count) {
  const seq = ++fleet.seq;
  try {
    const page = await api(fleetQuery(first, count || 60));
    if (seq !== fleet.seq) return;
    banner('');
    fleet.table.setTotal(page.matched);
    fleet.table.show(page.offset, page.rows);
    const s = page.summary;
    $('fleet-cards').replaceChildren(
      card('engines', fmt(s.engines)), card('healthy', fmt(s.healthy), 'ok'),
      card('unhealthy', fmt(s.unhealthy), s.unhealthy ? 'bad' : ''), card('drained', fmt(s.drained), s.drained ? 'warn' : ''),
      card('breaker open', fmt(s.breaker_open), s.breaker_open ? 'bad' : ''), card('load unknown', fmt(s.load_unknown), s.load_unknown ? 'warn' : ''),
      card('uncertain residency', fmt(s.uncertain), s.uncertain ? 'warn' : ''), card('in flight', fmt(s.inflight)),
      card('running', fmt(s.running)), card('waiting', fmt(s.waiting)), card('KV blocks indexed', page.kv_index ? fmt(s.kv_blocks) : '—'),
      ...Object.entries(s.by_role).map(([r, n]) => card(r + ' engines', fmt(n))));
    histogram($('fleet-kv'), s.kv_usage_histogram, ['0', '10', '20', '30', '40', '50', '60', '70', '80', '90%']);
    const ix = page.kv_index;
    $('fleet-index').replaceChildren(...(ix ? [
      ['blocks indexed', fmt(ix.Nodes) + ' / ' + fmt(ix.MaxNodes)], ['holders (engine, rank)', fmt(ix.Holders)],
      ['block-holder pairs', fmt(ix.Pairs)], ['lookups', fmt(ix.Lookups)], ['lookups with a hit', fmt(ix.LookupHits)],
      ['evictions', fmt(ix.Evictions)], ['memory', fmt(Math.round(ix.Bytes / 1024)) + ' KiB'],
    ] : [['index', 'none (no KV ingestion)']]).flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })]));
    $('fleet-count').textContent = fmt(page.matched) + ' of ' + fmt(s.engines) + ' engines';
    rendered('fleet');
    await fleetDetail(page.rows);
  } catch (err) { showError(err); }
}
function fleetInit() {
  if (!fleet.table) {
    fleet.table = new VirtualTable($('fleet-table'), 'fleet-cols', fleetRow);
    fleet.table.source = fleetLoad;
    for (const id of ['fleet-q', 'fleet-role', 'fleet-health']) $(id).addEventListener('input', () => fleet.table.draw());
    $('fleet-table').querySelectorAll('[data-sort]').forEach((el) => el.addEventListener('click', () => {
      const k = el.dataset.sort;
      fleet.sort = fleet.sort === k ? '-' + k : k;
      fleet.table.draw();
    }));
  }
  fleet.table.draw();
  every(2000, () => fleet.table.draw());
}

// ---- Buckets ----------------------------------------------------------------------------------
function groupLines(spec) {
  const g = spec.groups || {};
  const out = [];
  const one = (role, gs) => {
    if (!gs) return;
    const members = gs.engine_ids ? gs.engine_ids.join(', ') || '(none)' : 'every ' + role + ' engine of the models';
    const pol = gs.policy || {};
    const adm = pol.admission ? Object.entries(pol.admission).map(([k, v]) => k + ' ' + v).join(', ') : 'none';
    const rest = Object.assign({}, pol); delete rest.type; delete rest.admission;
    out.push(h('tr', {}, h('td', { text: role }), h('td', { text: pol.type || '(default)' }),
      h('td', { text: Object.keys(rest).length ? JSON.stringify(rest) : '' }), h('td', { text: adm }), h('td', { text: members })));
  };
  one('plain', g.plain);
  if (g.pd) { one('prefill', g.pd.prefill); one('decode', g.pd.decode); }
  return out;
}
async function bucketsLoad() {
  try {
    const d = await api('/ui/api/buckets');
    banner('');
    headerVersion(d.version);
    $('buckets-head').replaceChildren(h('h3', {}, 'Configuration version ' + d.version),
      h('div', { class: 'meta' }, h('span', { text: 'by ' + (d.author || 'unknown') }),
        h('span', { text: 'created ' + (d.created_at || '—') }), h('span', { text: 'loaded ' + d.loaded_at }),
        h('span', { text: 'from ' + d.source }), h('span', { text: fmt(d.decisions) + ' decisions seen' + (d.lost ? ' (' + fmt(d.lost) + ' missed)' : '') })));
    $('buckets-list').replaceChildren(...d.buckets.map((b) => {
      const s = b.spec, lim = s.limits || {};
      const rej = Object.entries(b.counters.rejections || {});
      return h('div', { class: 'panel bucket', 'data-bucket': s.id },
        h('h4', {}, (b.order + 1) + '. ' + s.id + ' ', h('span', { class: 'tag', text: b.kind })),
        h('div', { class: 'meta' },
          h('span', { text: 'models: ' + (s.models ? s.models.join(', ') : 'every model') }),
          h('span', { text: 'input tokens: ' + (lim.min || 0) + ' – ' + (lim.max === undefined ? '∞' : lim.max) }),
          h('span', { text: 'max context: ' + (s.max_context_tokens === undefined ? '∞' : s.max_context_tokens) }),
          h('span', { text: 'rank ' + (s.rank || 0) })),
        h('table', { class: 'plain' }, h('tr', {}, ...['group', 'policy', 'settings', 'admission caps', 'members'].map((t) => h('th', { text: t }))), groupLines(s)),
        h('div', { class: 'meta' },
          h('span', { class: 'tag ok', text: 'decisions ' + fmt(b.counters.decisions) }),
          h('span', { class: 'tag', text: 'fallbacks into this bucket ' + fmt(b.counters.fallbacks) }),
          rej.length ? rej.map(([k, n]) => h('span', { class: 'tag bad', text: 'rejected by ' + k + ': ' + fmt(n) })) : h('span', { class: 'tag', text: 'no rejections by cap' })));
    }));
    const errs = Object.entries(d.errors || {});
    $('buckets-errors').replaceChildren(...(errs.length ? errs.map(([k, n]) => h('tr', {}, h('td', { text: k }), h('td', { text: fmt(n) })))
      : [h('tr', {}, h('td', { class: 'muted', text: 'none' }))]));
    rendered('buckets');
  } catch (err) { showError(err); }
}
function bucketsInit() { bucketsLoad(); every(2000, bucketsLoad); }

// ---- Decisions ------------------------------------------------------------------------------
const tail = { items: [], max: 2000, table: null, paused: false, abort: null, last: 0, skipped: 0, selected: 0 };
function engines(r) { return r.decode ? r.engine + ' → ' + r.decode : (r.engine || '—'); }
function tailRow(r) {
  const el = h('div', { 'data-seq': r.seq, 'data-request': r.request_id, onclick: () => selectDecision(r.seq) },
    h('span', { text: r.seq }), h('span', { text: new Date(r.at).toLocaleTimeString() }), h('span', { text: r.model }),
    h('span', { text: fmt(r.input_tokens) }), h('span', { text: r.bucket || '—' }), h('span', { text: engines(r) }),
    h('span', { class: r.error ? 'bad' : '', text: r.error ? r.error : (r.reason + (r.decode_reason ? ' + ' + r.decode_reason : '')) + (r.dry_run ? ' (dry run)' : '') }),
    h('span', { text: r.took_us }));
  if (r.seq === tail.selected) el.classList.add('sel');
  return el;
}
function tailFilters() {
  const f = {};
  for (const k of ['model', 'bucket', 'engine', 'reason']) { const v = $('f-' + k).value.trim(); if (v) f[k] = v; }
  return f;
}
function keep(r, f) {
  return (!f.model || r.model === f.model) && (!f.bucket || r.bucket === f.bucket) &&
    (!f.engine || r.engine === f.engine || r.decode === f.engine) &&
    (!f.reason || r.reason === f.reason || r.decode_reason === f.reason || r.error === f.reason);
}
function tailDraw() {
  const n = tail.items.length;
  tail.table.setTotal(n);
  // Newest first.
  tail.table.source = (first, count) => tail.table.show(first, tail.items.slice(Math.max(0, n - first - count), n - first).reverse());
  tail.table.draw();
  $('tail-status').textContent = (tail.paused ? 'paused; ' : 'live; ') + fmt(n) + ' shown' + (tail.skipped ? ', ' + fmt(tail.skipped) + ' skipped by the stream' : '');
}
function tailAdd(r) {
  tail.items.push(r);
  if (tail.items.length > tail.max) tail.items.splice(0, tail.items.length - tail.max);
  tail.last = Math.max(tail.last, r.seq);
}
async function tailStart() {
  if (tail.abort) tail.abort.abort();
  const f = tailFilters();
  const ctrl = new AbortController();
  tail.abort = ctrl;
  try {
    const init = await api('/ui/api/decisions?' + new URLSearchParams(Object.assign({ limit: 200 }, f)));
    if (ctrl.signal.aborted) return;
    banner('');
    tail.items = [];
    (init.decisions || []).forEach(tailAdd);
    tail.last = init.head;
    tailDraw();
    rendered('decisions');
  } catch (err) { showError(err); return; }
  let backoff = 500;
  while (!ctrl.signal.aborted) {
    try {
      const resp = await fetch('/ui/api/decisions/stream?' + new URLSearchParams(Object.assign({ after: tail.last }, f)),
        { headers: Object.assign({ Accept: 'text/event-stream' }, authHeaders()), signal: ctrl.signal });
      if (!resp.ok) throw new APIError(resp.status, await resp.json().catch(() => null));
      backoff = 500;
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      let dirty = false;
      const flush = setInterval(() => { if (dirty && !tail.paused) { dirty = false; tailDraw(); } }, 250);
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i); buf = buf.slice(i + 2);
            let ev = 'message', data = '';
            for (const line of block.split('\n')) {
              if (line.startsWith('event: ')) ev = line.slice(7);
              else if (line.startsWith('data: ')) data += line.slice(6);
            }
            if (ev === 'decision') { tailAdd(JSON.parse(data)); dirty = true; }
            else if (ev === 'skipped') { const s = JSON.parse(data); tail.skipped += s.skipped; tail.last = Math.max(tail.last, s.next); dirty = true; }
          }
        }
      } finally { clearInterval(flush); }
    } catch (err) {
      if (ctrl.signal.aborted) return;
      if (err instanceof APIError) { showError(err); }
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10000);
  }
}
function role(r) { return (r || '').replace('ROLE_', '').toLowerCase(); }
function explainView(ex) {
  if (!ex) return h('p', { class: 'muted', text: 'The caller did not ask for an explanation. "explain now" runs a dry-run Decide with the same request.' });
  const box = h('div', { class: 'explain' }, h('div', { text: 'oldest load used: ' + dur(ex.oldestLoadAge) }));
  for (const a of ex.attempts || []) {
    const d = h('details', { open: true }, h('summary', {}, 'bucket ' + a.bucketId + ': ', h('b', { text: a.outcome }), Number(a.capacity) ? ' (capacity ' + fmt(a.capacity) + ' tokens)' : ' (unbounded)'));
    for (const s of a.stages || []) {
      const sd = h('details', { open: true }, h('summary', {}, role(s.role) + ' · ' + s.policy + ' → ' + (s.pickedEngineId || s.outcome) + (s.reason ? ' (' + s.reason + ')' : '') + (s.prefixLookup ? ' · prefix ' + s.prefixLookup : '')));
      if (s.detail) sd.append(h('div', { class: 'muted', text: s.detail }));
      const t = h('table', { class: 'plain' }, h('tr', {}, ...['engine', 'load', 'running', 'waiting', 'KV used', 'in flight', 'matched', 'uncached', 'rejection', 'note'].map((x) => h('th', { text: x }))));
      for (const c of s.candidates || []) {
        t.append(h('tr', {}, h('td', { text: c.engineId }), h('td', { text: c.loadKnown ? 'age ' + dur(c.loadAge) : 'unknown' }),
          h('td', { text: c.runningRequests || 0 }), h('td', { text: c.waitingRequests || 0 }),
          h('td', { text: Number(c.kvCapacityTokens) ? pct(Number(c.kvUsedTokens || 0) / Number(c.kvCapacityTokens)) : '—' }),
          h('td', { text: c.inflightRequests || 0 }), h('td', { text: Number(c.matchedTokens) ? c.matchedTokens : '' }), h('td', { text: Number(c.uncachedTokens) ? c.uncachedTokens : '' }),
          h('td', { class: c.rejection ? 'bad' : '', text: c.rejection || '' }), h('td', { text: c.note || '' })));
      }
      sd.append(t);
      d.append(sd);
    }
    box.append(d);
  }
  return box;
}
async function selectDecision(seq) {
  tail.selected = seq;
  tail.table.draw();
  $('detail-title').textContent = '#' + seq;
  try {
    const r = await api('/ui/api/decisions/' + seq);
    const rows = [['model', r.model], ['request id', r.request_id || '—'], ['input tokens', fmt(r.input_tokens)],
      ['expected peak', r.peak_tokens ? fmt(r.peak_tokens) : '—'], ['bucket', r.bucket || '—'], ['engine(s)', engines(r)],
      ['reason', r.error ? r.error + ': ' + r.message : r.reason + (r.decode_reason ? ' + ' + r.decode_reason : '')],
      ['config version', r.config_version || '—'], ['took', r.took_us + ' µs'], ['dry run', r.dry_run ? 'yes' : 'no']];
    const out = [h('dl', { class: 'kv' }, rows.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })]))];
    if (r.rejections) out.push(h('div', {}, r.rejections.map((x) => h('span', { class: 'tag bad', text: x.bucket + '/' + x.engine + ': ' + x.limit }))));
    out.push(explainView(r.explain));
    out.push(h('button', { type: 'button', onclick: () => {
      const f = $('decide-form');
      f.model.value = r.model; f.input_tokens.value = r.input_tokens; f.expected_peak_tokens.value = r.peak_tokens || '';
      f.requestSubmit();
    } }, 'explain now (dry run)'));
    $('detail').replaceChildren(...out);
  } catch (err) { $('detail').replaceChildren(h('p', { class: 'bad', text: err.message })); }
}
async function dryRun(ev) {
  ev.preventDefault();
  const f = ev.target;
  const body = { model: f.model.value, input_tokens: String(f.input_tokens.value || 0), dry_run: true, explain: true };
  if (f.expected_peak_tokens.value) body.expected_peak_tokens = String(f.expected_peak_tokens.value);
  if (f.routing_key.value) body.routing_key = f.routing_key.value;
  const out = $('decide-out');
  try {
    // Decide keeps its own rule: open, or the decide (or admin) token when the decider has one.
    const r = await api('/v1/decide', { method: 'POST', body, token: state.adminToken || state.token });
    const pick = r.pick && (r.pick.plain ? r.pick.plain.engineId + ' (' + r.pick.plain.reason + ')'
      : r.pick.pd.prefill.engineId + ' → ' + r.pick.pd.decode.engineId);
    out.replaceChildren(h('p', {}, 'bucket ', h('b', { text: r.bucketId }), ', ', h('b', { class: 'pick', text: pick }), ', version ' + r.configVersion), explainView(r.explain));
  } catch (err) {
    out.replaceChildren(h('p', { class: 'bad', text: (err.reason ? err.reason + ': ' : '') + err.message }));
  }
}
function decisionsInit() {
  if (!tail.table) {
    tail.table = new VirtualTable($('tail-table'), 'tail-cols', tailRow);
    for (const k of ['model', 'bucket', 'engine', 'reason']) $('f-' + k).addEventListener('change', tailStart);
    $('f-pause').addEventListener('click', () => { tail.paused = !tail.paused; $('f-pause').textContent = tail.paused ? 'resume' : 'pause'; tailDraw(); });
    $('decide-form').addEventListener('submit', dryRun);
  }
  tailStart();
}

// ---- Cache ------------------------------------------------------------------------------------
const cache = { table: null, engines: [] };
function cacheRow(e) {
  const looked = e.hits + e.misses;
  return h('div', { 'data-engine': e.engine }, h('span', { text: e.engine }), h('span', { text: fmt(e.decisions) }),
    h('span', { text: fmt(e.hits) }), h('span', { text: fmt(e.misses) }), h('span', { text: looked ? pct(e.hits / looked) : '—' }),
    h('span', { text: fmt(e.sampled) }), h('span', { text: fmt(e.matched_tokens) }), h('span', { text: fmt(e.uncached_tokens) }),
    h('span', { text: e.sampled ? pct(e.matched_tokens / (e.matched_tokens + e.uncached_tokens)) : '—' }));
}
async function cacheLoad() {
  try {
    const d = await api('/ui/api/cache');
    banner('');
    document.querySelectorAll('.binsec').forEach((el) => { el.textContent = d.bin_seconds; });
    $('cache-hit').dataset.bin = d.bin_seconds;
    lineChart($('cache-hit'), d.bins.map((b) => (b.hits + b.misses ? b.hits / (b.hits + b.misses) : null)), 1, (v) => Math.round(v * 100) + '%', '#2b6cb0');
    stackedBars($('cache-tokens'), [d.bins.map((b) => b.matched_tokens), d.bins.map((b) => b.uncached_tokens)], ['#1f8a4c', '#d0d5dd'], (v) => fmt(Math.round(v)));
    const sum = (k) => d.bins.reduce((s, b) => s + b[k], 0);
    const hits = sum('hits'), misses = sum('misses'), m = sum('matched_tokens'), u = sum('uncached_tokens');
    const ix = d.kv_index;
    $('cache-cards').replaceChildren(card('decisions (10 min)', fmt(sum('decisions'))), card('prefix hit rate', hits + misses ? pct(hits / (hits + misses)) : '—', 'ok'),
      card('matched tokens (sampled)', fmt(m)), card('uncached tokens (sampled)', fmt(u)), card('matched share', m + u ? pct(m / (m + u)) : '—'),
      card('blocks indexed', ix ? fmt(ix.blocks) : 'no index'), card('index lookups hit', ix && ix.lookups ? pct(ix.lookup_hits / ix.lookups) : '—'));
    cache.engines = d.engines || [];
    cache.table.setTotal(cache.engines.length);
    cache.table.draw();
    rendered('cache');
  } catch (err) { showError(err); }
}
function cacheInit() {
  if (!cache.table) {
    cache.table = new VirtualTable($('cache-table'), 'cache-cols', cacheRow);
    cache.table.source = (first, count) => cache.table.show(first, cache.engines.slice(first, first + count));
  }
  cacheLoad();
  every(2000, cacheLoad);
}

// ---- History ----------------------------------------------------------------------------------
const hist = { selected: 0, current: 0 };
function pretty(docJSON) { return JSON.stringify(JSON.parse(docJSON || '{}'), null, 2).split('\n'); }
// diffLines is a longest-common-subsequence line diff: [op, line] with op ' ', '+' or '-'.
function diffLines(a, b) {
  const n = a.length, m = b.length;
  if (n * m > 4e6) return [...a.map((l) => ['-', l]), ...b.map((l) => ['+', l])];
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([' ', a[i]]); i++; j++; } else if (dp[i + 1][j] >= dp[i][j + 1]) out.push(['-', a[i++]]); else out.push(['+', b[j++]]);
  }
  while (i < n) out.push(['-', a[i++]]);
  while (j < m) out.push(['+', b[j++]]);
  return out;
}
// hunks keeps the changed lines with ctx lines of context around them and folds the rest.
function hunks(lines, ctx) {
  if (!isFinite(ctx)) return lines;
  const near = new Uint8Array(lines.length);
  lines.forEach(([op], i) => { if (op !== ' ') for (let j = Math.max(0, i - ctx); j <= Math.min(lines.length - 1, i + ctx); j++) near[j] = 1; });
  const out = [];
  let folded = 0;
  lines.forEach((l, i) => {
    if (near[i]) {
      if (folded) { out.push([' ', '… ' + folded + ' unchanged lines']); folded = 0; }
      out.push(l);
    } else folded++;
  });
  if (folded) out.push([' ', '… ' + folded + ' unchanged lines']);
  if (!lines.some(([op]) => op !== ' ')) return [[' ', 'no change in the document']];
  return out;
}
async function historyLoad() {
  try {
    const d = await api('/v1/admin/versions?limit=50');
    banner('');
    hist.current = Number(d.currentVersion);
    $('version').textContent = 'config v' + hist.current;
    $('versions').replaceChildren(h('tr', {}, ...['version', 'author', 'created', 'summary'].map((t) => h('th', { text: t }))),
      h('tbody', {}, (d.versions || []).map((v) => {
        const tr = h('tr', { 'data-version': v.version, onclick: () => showVersion(Number(v.version)) },
          h('td', {}, String(v.version), Number(v.version) === hist.current ? h('span', { class: 'tag ok', text: 'in force' }) : ''),
          h('td', { text: v.author || '' }), h('td', { text: v.createdAt ? new Date(v.createdAt).toLocaleString() : '' }),
          h('td', { text: v.summary || (Number(v.rollbackOf) ? 'rollback to ' + v.rollbackOf : '') }));
        if (Number(v.version) === hist.selected) tr.classList.add('sel');
        return tr;
      })));
    rendered('history');
  } catch (err) { showError(err); }
}
async function showVersion(v) {
  hist.selected = v;
  document.querySelectorAll('#versions tr').forEach((tr) => tr.classList.toggle('sel', Number(tr.dataset.version) === v));
  $('diff-title').textContent = v + (v > 1 ? ' (diff against ' + (v - 1) + ')' : '');
  $('rollback-box').hidden = v === hist.current;
  $('rollback-btn').textContent = 'roll back to version ' + v;
  $('rollback-out').replaceChildren();
  try {
    const cur = await api('/v1/admin/versions/' + v);
    let prev = null;
    if (v > 1) { try { prev = await api('/v1/admin/versions/' + (v - 1)); } catch (e) { prev = null; } }
    const lines = prev ? diffLines(pretty(prev.documentJson), pretty(cur.documentJson)) : pretty(cur.documentJson).map((l) => [' ', l]);
    $('diff').replaceChildren(...hunks(lines, prev ? 3 : Infinity).map(([op, l]) => h('span', { class: op === '+' ? 'add' : op === '-' ? 'del' : 'ctx', text: op + ' ' + l })));
  } catch (err) { $('diff').replaceChildren(h('span', { class: 'del', text: err.message })); }
}
async function rollback(ev) {
  ev.preventDefault();
  const tok = $('admin-token').value.trim();
  if (tok) state.adminToken = tok; // this page's memory only
  $('admin-token').value = '';
  $('admin-token').placeholder = state.adminToken ? 'admin token set (this tab)' : 'kept in this tab only';
  const v = hist.selected;
  try {
    const r = await api('/v1/admin/versions/' + v + ':rollback', { method: 'POST', body: { basedOnVersion: String(hist.current) }, token: state.adminToken });
    $('rollback-out').replaceChildren(h('p', { class: 'ok', text: 'now version ' + r.version + ': ' + (r.summary || '') }));
    headerVersion(r.version);
    await historyLoad();
  } catch (err) {
    if (err.status === 401 || err.status === 403) state.adminToken = '';
    $('rollback-out').replaceChildren(h('p', { class: 'bad', text: (err.reason ? err.reason + ': ' : '') + err.message }));
  }
}
function historyInit() {
  if (!hist.bound) { $('rollback-form').addEventListener('submit', rollback); hist.bound = true; }
  historyLoad();
  every(5000, historyLoad);
}

// ---- routing ----------------------------------------------------------------------------------
// headerVersion shows the configuration version in force in the header; every answer that
// names it (the buckets page, a rollback) updates it.
function headerVersion(v) { $('version').textContent = 'config v' + v; }
// loadVersion reads that version at page load and again when a token is entered (a refused
// first read left it blank); data-state says whether the last read settled ("ok" or
// "refused"), so a test can wait for it.
function loadVersion() {
  const el = $('version');
  api('/ui/api/buckets').then((d) => { headerVersion(d.version); el.dataset.state = 'ok'; })
    .catch(() => { el.dataset.state = 'refused'; });
}
const pages = { fleet: fleetInit, buckets: bucketsInit, decisions: decisionsInit, cache: cacheInit, history: historyInit };
function route() {
  const page = (location.hash.replace(/^#\//, '') || 'fleet').split('?')[0];
  const name = pages[page] ? page : 'fleet';
  state.timers.forEach(clearInterval);
  state.timers = [];
  if (name !== 'decisions' && tail.abort) { tail.abort.abort(); tail.abort = null; }
  state.page = name;
  delete document.body.dataset.rendered;
  document.querySelectorAll('.page').forEach((s) => { s.hidden = s.id !== 'page-' + name; });
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === name));
  pages[name]();
}
document.addEventListener('DOMContentLoaded', () => {
  $('token').value = state.token;
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.token = $('token').value.trim();
    if (state.token) sessionStorage.setItem('sluice.viewerToken', state.token); else sessionStorage.removeItem('sluice.viewerToken');
    route();
    loadVersion();
  });
  window.addEventListener('hashchange', route);
  route();
  loadVersion();
});
