// sluice dashboard: follows GET /api/v1/stream (Server-Sent Events) and
// draws the fleet, the rollout, the pause, the leader and the events.
// No library, nothing from elsewhere: docs/dashboard.md.
'use strict';

const S = {
  config: null,
  nodes: new Map(),        // name → NodeObject (as sluice get nodes -o json)
  rollouts: new Map(),     // id → Rollout
  active: '',
  applied: '',             // the last-applied rollout: its revision is in force
  head: null,              // sluice-revisions/head: {head} as stored, {unreadable} or {} (none)
  fps: new Map(),          // fingerprint → InvalidFingerprint
  pause: [], pauseSummary: null,
  leader: {},
  coordinator: null,       // the coordinator panel (lease, term, TTL, how it ended, instances)
  freezes: [], registries: [],
  timelines: new Map(),    // rollout id → its plan against actual (view.Timeline), with when it came
  tallies: new Map(),      // rollout id → its counts by category (contract.TallyOf)
  events: [],              // streamEvent, oldest first (at most 500)
  lastId: '',
  layoutDirty: true,       // the set of nodes or their domains changed: lay the map out again
  fullPaint: true,         // repaint every cell (a rollout changed what cells mean)
  dirtyNodes: new Set(),   // otherwise repaint only these
  names: null,             // every node's name, sorted (null: sort again)
};
const PAGE = 50;
let page = 0, es = null, frame = 0, cells = [], cellOf = new Map(), drawerNode = '';

const $ = (id) => document.getElementById(id);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v; else if (k.startsWith('data-') || k === 'class' || k === 'tabindex' || k === 'role' || k === 'aria-label') e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
};

// The CLI's words for an enum: NODE_PHASE_PROVISIONED → Provisioned.
function enumName(s, prefix) {
  if (!s) return '-';
  s = s.replace(prefix, '');
  if (s === 'UNSPECIFIED') return '-';
  return s.toLowerCase().split('_').filter(Boolean).map(w => w[0].toUpperCase() + w.slice(1)).join('');
}
const short = (s, n = 12) => (s ? s.slice(0, n) : '-');

// What a node's cell says: its category in the rollout shown, as the
// server placed it (contract.Place: the same categories as the counts).
// The words come from the server (config.categories); here only how each
// is drawn. A node whose agent is not present is dotted, whatever its category.
const STATES = {
  pending: { color: '--pending' },
  inProgress: { color: '--progress' },
  provisioned: { color: '--provisioned' },
  failed: { color: '--failed', mark: 'x' },
  timedOut: { color: '--timedout', mark: 'stripe' },
  skipped: { color: '--left' },
  incompatible: { color: '--left', mark: 'stripe' },
  stopped: { color: '--stopped' },
  notStarted: { color: '--pending' },
  reverting: { color: '--reverted', mark: 'stripe' },
  reverted: { color: '--reverted' },
  revertFailed: { color: '--revertfailed', mark: 'x' },
  outside: { color: '--outside' },
};
// words is a category's words as the server says them.
function words(key) {
  const c = S.config && (S.config.categories || []).find(x => x.key === key);
  return c ? c.words : key;
}
// stateLabel is what the tooltip and the list say of a node's category
// (out: outcomes()).
const stateLabel = (st, n, out) => words(st) + (out && out.has(n.node) && st === 'reverted' ? ' (it failed first)' : '') +
  (n && !n.present ? ' (left: not present)' : '');
// outcomes is the shown rollout's forward failures by node: a failed node
// drawn reverted keeps its cross. Only for drawing: the categories are the server's.
function outcomes() {
  const r = S.rollouts.get(S.active) || newestRollout(), m = new Map();
  for (const f of (r && r.failures) || []) if (f.result !== 'NODE_RESULT_REVERT_FAILED' && f.failedCheck !== 'revert') m.set(f.node, f.result);
  return m;
}
function nodeState(n) { return (n && n.state && STATES[n.state]) ? n.state : 'outside'; }
// A node's failure-domain labels: its presence's; one that left keeps those
// the dashboard last saw (the stream's domain for it).
const labels = (n) => (n.presence && n.presence.labels) || n.labels || {};
function domainOf(n) {
  const l = labels(n);
  return (S.config ? S.config.groupBy : ['zone', 'rack']).map(k => l[k] || `(no ${k})`);
}
function newestRollout() {
  let best = null;
  for (const r of S.rollouts.values()) {
    if (!best || (r.startedAt || '') > (best.startedAt || '') || ((r.startedAt || '') === (best.startedAt || '') && Number(r.generation || 0) > Number(best.generation || 0))) best = r;
  }
  return best;
}

// ---- the stream ----

// expand turns the stream's compact fleet (column by column, strings by
// index: compactFleet in compact.go) back into node objects of the shape
// sluice get nodes -o json prints, with the fields the map and list use.
function expand(f) {
  const out = new Array(f.names.length);
  for (let i = 0; i < f.names.length; i++) {
    const name = f.names[i], present = f.present[i] === '1', d = f.domains[f.domain[i]];
    const n = { node: name, present };
    const labels = {};
    f.groupBy.forEach((k, j) => { if (d[j]) labels[k] = d[j]; });
    if (present) n.presence = { node: name, labels };
    else n.labels = labels;
    const phase = f.phases[f.phase[i]], rev = f.revisions[f.revision[i]], ro = f.rollouts[f.rollout[i]];
    if (phase || rev || ro) n.status = { node: name, phase, revision: rev, rollout: ro };
    n.state = f.states[f.state[i]];
    out[i] = n;
  }
  return out;
}

function apply(u) {
  if (u.reset) { S.nodes.clear(); S.rollouts.clear(); S.fps.clear(); S.events = []; S.timelines.clear(); S.tallies.clear(); S.layoutDirty = true; }
  for (const n of (u.fleet ? expand(u.fleet) : u.nodes || [])) {
    const old = S.nodes.get(n.node);
    if (!old || domainOf(old).join('/') !== domainOf(n).join('/')) S.layoutDirty = true;
    S.nodes.set(n.node, n);
    S.dirtyNodes.add(n.node);
  }
  for (const name of u.removedNodes || []) { S.nodes.delete(name); S.layoutDirty = true; }
  if (S.layoutDirty) S.names = null;
  for (const r of u.rollouts || []) S.rollouts.set(r.id, r);
  if (u.active !== undefined) S.active = u.active;
  if (u.applied !== undefined) S.applied = u.applied;
  if (u.head) S.head = u.head;
  if (u.rollouts || u.active !== undefined) S.fullPaint = true;
  for (const f of u.fingerprints || []) S.fps.set(f.fingerprint, f);
  for (const f of u.removedFingerprints || []) S.fps.delete(f);
  if (u.pause) { S.pause = u.pause; S.pauseSummary = u.pauseSummary; }
  if (u.leader) S.leader = u.leader;
  if (u.coordinator) S.coordinator = u.coordinator;
  if (u.freezes) S.freezes = u.freezes;
  if (u.registries) S.registries = u.registries;
  if (u.storeLoss !== undefined) { const b = $('store-loss'); b.textContent = u.storeLoss; b.hidden = !u.storeLoss; }
  if (u.storage !== undefined) { const b = $('storage'); b.textContent = u.storage; b.hidden = !u.storage; }
  for (const tl of u.timelines || []) { tl.at = Date.now(); S.timelines.set(tl.rollout, tl); }
  for (const t of u.tallies || []) S.tallies.set(t.rollout, t);
  if (u.events) { S.events.push(...u.events); if (S.events.length > 500) S.events.splice(0, S.events.length - 500); }
  schedule();
}

function connect() {
  if (es || document.hidden) return;
  // A reconnect after the tab was hidden resumes where it stopped.
  const url = '/api/v1/stream' + (S.lastId ? '?lastEventId=' + encodeURIComponent(S.lastId) : '');
  es = new EventSource(url);
  es.addEventListener('open', () => setConn('live', 'live'));
  es.addEventListener('update', (e) => { S.lastId = e.lastEventId; apply(JSON.parse(e.data)); });
  es.addEventListener('error', () => {
    if (es && es.readyState === EventSource.CLOSED) {
      es = null;
      setConn('down', 'disconnected; retrying');
      setTimeout(start, 2000);
    } else setConn('down', 'reconnecting');
  });
}
function disconnect() { if (es) { es.close(); es = null; } }
function setConn(state, text) { const c = $('conn'); c.dataset.state = state; c.textContent = text; }

document.addEventListener('visibilitychange', () => {
  // A hidden tab stops streaming; it resumes from its last event when shown.
  if (document.hidden) { disconnect(); setConn('idle', 'paused while hidden'); } else connect();
});

async function api(path, opts) {
  let r;
  try { r = await fetch(path, Object.assign({ credentials: 'same-origin' }, opts)); } catch (e) {
    return { ok: false, status: 0, body: { error: 'the dashboard cannot be reached: ' + e.message } };
  }
  let body = null;
  try { body = await r.json(); } catch (_) { /* not JSON */ }
  if (r.status === 401) showLogin();
  return { ok: r.ok, status: r.status, body };
}
async function checkAuth() {
  const r = await api('/api/v1/config');
  if (r.ok) { S.config = r.body; applyConfig(); }
  return r.ok;
}
function showLogin() { const d = $('login'); if (!d.open) d.showModal(); }
$('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const r = await api('/api/v1/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token: $('login-token').value }) });
  if (!r.ok) { $('login-error').textContent = (r.body && r.body.error) || 'login failed'; return; }
  $('login').close();
  $('login-token').value = '';
  if (await checkAuth()) connect();
});

// ---- drawing ----

function schedule() { if (!frame) frame = requestAnimationFrame(render); }
function render() {
  frame = 0;
  const out = outcomes();
  drawMap(out);
  renderList(out);
  renderRollout();
  renderHeld();
  renderHistory();
  renderHeader();
  renderPlane();
  renderEvents();
}

function applyConfig() {
  const c = S.config;
  const why = c.controls ? '' : (c.readonly || 'controls are disabled');
  for (const b of document.querySelectorAll('button.control')) { b.disabled = !c.controls; b.title = why; }
  const ro = $('readonly');
  ro.hidden = c.controls;
  ro.textContent = why ? 'controls disabled: ' + why : '';
  const lg = $('legend');
  lg.replaceChildren(...Object.entries(STATES).map(([k, s]) => {
    const e = el('span', { text: words(k), 'data-state': k });
    e.title = ((c.categories || []).find(x => x.key === k) || {}).meaning || '';
    e.style.setProperty('--c', `var(${s.color})`);
    return e;
  }));
}

function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

// The map: one block per outer group (zone), inside it one per inner group
// (rack), inside that one cell per node. Laid out again only when the set
// of nodes or their domains change; otherwise only colors are repainted.
let layout = { width: 0, height: 0, groups: [] };
function computeLayout(width) {
  const groups = new Map();
  for (const n of S.nodes.values()) {
    const d = domainOf(n);
    const outer = d[0], inner = d.slice(1).join('/') || '';
    if (!groups.has(outer)) groups.set(outer, new Map());
    const g = groups.get(outer);
    if (!g.has(inner)) g.set(inner, []);
    g.get(inner).push(n.node);
  }
  const total = S.nodes.size;
  const cell = total > 20000 ? 3 : total > 5000 ? 5 : total > 1000 ? 8 : total > 200 ? 12 : 22;
  const gap = Math.max(1, Math.floor(cell / 6));
  const pitch = cell + gap;
  let y = 0;
  cells = [];
  cellOf = new Map();
  const out = [];
  // A rack is at least as wide as its label and its provisioned/nodes; its
  // ✗ ◔ ⟳ counts go on a second line when they would not fit beside them.
  const g = $('map').getContext('2d');
  g.font = RACK_FONT;
  const textW = (t) => Math.ceil(g.measureText(t).width);
  // Nodes without the labels (one that left has no presence, so no labels) come last.
  const byName = (a, b) => (a.startsWith('(no ') - b.startsWith('(no ')) || a.localeCompare(b);
  for (const outer of [...groups.keys()].sort(byName)) {
    y += 18;
    out.push({ label: outer, x: 0, y: y - 5, level: 0 });
    let x = 0, rowH = 0;
    const racks = groups.get(outer);
    for (const inner of [...racks.keys()].sort(byName)) {
      const names = racks.get(inner).sort();
      const cols = Math.max(1, Math.min(names.length, Math.floor(Math.sqrt(names.length * 2)) || 1, Math.floor((width - 8) / pitch)));
      const k = names.length, headW = textW(`${inner}  ${k}/${k}`) + 10;
      const w = Math.min(Math.max(cols * pitch + 8, headW), width);
      const lines = w - 10 >= textW(`${inner}  ${k}/${k} ✗${k} ◔${k} ⟳${k}`) ? 1 : 2;
      const top = 12 * lines + 3, h = Math.ceil(names.length / cols) * pitch + top + 3;
      if (x > 0 && x + w > width) { x = 0; y += rowH + 6; rowH = 0; }
      const grp = { label: inner, x: x + 2, y: y + 11, level: 1, box: [x, y, w - 4, h], counts: {}, total: names.length, lines };
      out.push(grp);
      names.forEach((name, i) => {
        const c = { name, grp, st: '', x: x + 4 + (i % cols) * pitch, y: y + top + Math.floor(i / cols) * pitch, s: cell };
        cells.push(c);
        cellOf.set(name, c);
      });
      x += w; rowH = Math.max(rowH, h);
    }
    y += rowH + 8;
  }
  layout = { width, height: Math.max(y, 40), groups: out };
}

function drawMap(out) {
  const canvas = $('map');
  const width = Math.max(300, canvas.clientWidth || 600);
  if (S.layoutDirty || layout.width !== width) { computeLayout(width); S.layoutDirty = false; S.fullPaint = true; }
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(layout.height * dpr)) {
    canvas.width = Math.round(width * dpr); canvas.height = Math.round(layout.height * dpr);
    canvas.style.height = layout.height + 'px';
    S.fullPaint = true;
  }
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  const colors = {};
  for (const [k, s] of Object.entries(STATES)) colors[k] = css(s.color);
  const active = S.rollouts.get(S.active);
  // Between two layouts only the cells of nodes that changed are painted:
  // a rollout at maxParallel 1000 repaints 2,000 cells an update, not the fleet.
  let todo;
  const rollups = new Set();
  if (S.fullPaint) {
    g.clearRect(0, 0, width, layout.height);
    for (const grp of layout.groups) {
      if (grp.box) {
        g.strokeStyle = '#d8d8d8'; g.lineWidth = 1; g.strokeRect(grp.box[0] + .5, grp.box[1] + .5, grp.box[2], grp.box[3]);
        grp.counts = {};
        rollups.add(grp);
        continue;
      }
      g.fillStyle = '#1b1b1b';
      g.font = 'bold 12px system-ui, sans-serif';
      g.fillText(grp.label, grp.x, grp.y);
    }
    for (const c of cells) c.st = '';
    todo = cells;
  } else {
    todo = [];
    for (const name of S.dirtyNodes) { const c = cellOf.get(name); if (c) todo.push(c); }
  }
  for (const c of todo) {
    const st = paintCell(g, c, out, colors, active, !S.fullPaint);
    if (st !== c.st) {
      if (c.st) c.grp.counts[c.st]--;
      c.grp.counts[st] = (c.grp.counts[st] || 0) + 1;
      c.st = st;
      rollups.add(c.grp);
    }
  }
  for (const grp of rollups) drawRollup(g, grp);
  S.fullPaint = false;
  S.dirtyNodes.clear();
  $('fleet-count').textContent = `${S.nodes.size} node${S.nodes.size === 1 ? '' : 's'}`;
}

// paintCell paints one node's cell: its color, a shape for the states that
// need attention (failed crossed, timed out striped, left dotted), and an
// outline while it is in the running wave.
function paintCell(g, c, out, colors, active, clear) {
  const n = S.nodes.get(c.name);
  if (clear) g.clearRect(c.x - 1, c.y - 1, c.s + 2, c.s + 2);
  if (!n) return '';
  const st = nodeState(n, out);
  g.fillStyle = colors[st];
  g.fillRect(c.x, c.y, c.s, c.s);
  const m = STATES[st].mark || (st === 'reverted' && out.has(n.node) ? 'x' : '') || (!n.present ? 'dot' : '');
  if (m && c.s >= 4) {
    // White on the dark colors, dark on the light greys (pending, not started, not in this rollout).
    const ink = ['pending', 'notStarted', 'outside'].includes(st) ? '#5a5a5a' : '#ffffff';
    g.strokeStyle = ink; g.fillStyle = ink; g.lineWidth = Math.max(1, c.s / 8);
    g.beginPath();
    if (m === 'x') { g.moveTo(c.x + 1, c.y + 1); g.lineTo(c.x + c.s - 1, c.y + c.s - 1); g.moveTo(c.x + c.s - 1, c.y + 1); g.lineTo(c.x + 1, c.y + c.s - 1); g.stroke(); }
    else if (m === 'stripe') { g.moveTo(c.x, c.y + c.s / 2); g.lineTo(c.x + c.s / 2, c.y); g.moveTo(c.x + c.s / 2, c.y + c.s); g.lineTo(c.x + c.s, c.y + c.s / 2); g.stroke(); }
    else { g.arc(c.x + c.s / 2, c.y + c.s / 2, c.s / 5, 0, 2 * Math.PI); g.fill(); }
  }
  if (active && n.status && n.status.rollout === active.id && st === 'inProgress' && c.s >= 5) {
    g.strokeStyle = '#1b1b1b'; g.lineWidth = 1; g.strokeRect(c.x - .5, c.y - .5, c.s + 1, c.s + 1);
  }
  return st;
}

// drawRollup labels a rack with its rollup: provisioned of its nodes, and
// how many failed, timed out or are in progress.
const RACK_FONT = '11px system-ui, sans-serif';
function drawRollup(g, grp) {
  const [x, y, w] = grp.box, k = grp.counts;
  const head = `${grp.label}  ${k.provisioned || 0}/${grp.total}`;
  const marks = [k.failed && `✗${k.failed}`, k.timedOut && `◔${k.timedOut}`, k.inProgress && `⟳${k.inProgress}`].filter(Boolean).join(' ');
  grp.drawn = grp.lines === 1 || !marks ? [marks ? head + ' ' + marks : head] : [head, marks];
  grp.rollup = grp.drawn.join(' ');
  g.save();
  g.clearRect(x + 1, y + 1, w - 1, 12 * grp.lines);
  g.beginPath(); g.rect(x + 1, y + 1, w - 1, 12 * grp.lines); g.clip();
  g.fillStyle = k.failed || k.timedOut ? '#a33b00' : '#5a5a5a';
  g.font = RACK_FONT;
  grp.drawn.forEach((t, i) => g.fillText(t, grp.x, grp.y + 12 * i));
  g.restore();
}

function cellAt(ev) {
  const r = $('map').getBoundingClientRect();
  const x = ev.clientX - r.left, y = ev.clientY - r.top;
  return cells.find(c => x >= c.x && x < c.x + c.s + 1 && y >= c.y && y < c.y + c.s + 1);
}
$('map').addEventListener('mousemove', (ev) => {
  const c = cellAt(ev), tip = $('tip');
  if (!c) { tip.hidden = true; return; }
  const n = S.nodes.get(c.name);
  tip.textContent = `${c.name} — ${stateLabel(nodeState(n), n, outcomes())}`;
  tip.style.left = (c.x + c.s + 6) + 'px'; tip.style.top = (c.y - 4) + 'px';
  tip.hidden = false;
});
$('map').addEventListener('mouseleave', () => { $('tip').hidden = true; });
$('map').addEventListener('click', (ev) => { const c = cellAt(ev); if (c) openDrawer(c.name); });

// ---- the node list: every node's name reachable in the DOM ----

function filtered(out) {
  const q = $('search').value.trim().toLowerCase();
  if (!S.names) S.names = [...S.nodes.keys()].sort();
  const names = S.names;
  if (!q) return names;
  return names.filter(name => {
    const n = S.nodes.get(name);
    return name.toLowerCase().includes(q) || domainOf(n).join('/').toLowerCase().includes(q) ||
      stateLabel(nodeState(n), n, out).toLowerCase().includes(q);
  });
}
function renderList(out) {
  const names = filtered(out);
  const pages = Math.max(1, Math.ceil(names.length / PAGE));
  page = Math.min(page, pages - 1);
  const rows = names.slice(page * PAGE, page * PAGE + PAGE).map(name => {
    const n = S.nodes.get(name), st = nodeState(n, out);
    const phase = el('td', { class: 'phase-cell', text: stateLabel(st, n, out) });
    phase.style.setProperty('--c', `var(${STATES[st].color})`);
    const tr = el('tr', { 'data-node': name, 'data-state': st, 'data-phase': enumName(n.status && n.status.phase, 'NODE_PHASE_'),
      'data-revision': (n.status && n.status.revision) || '', tabindex: '0' },
      el('th', { scope: 'row', text: name }), phase, el('td', { text: domainOf(n).join('/') }), el('td', { text: short(n.status && n.status.revision) }));
    return tr;
  });
  $('node-rows').replaceChildren(...rows);
  $('page').textContent = `page ${page + 1} of ${pages} (${names.length} nodes)`;
  $('prev').disabled = page === 0; $('next').disabled = page >= pages - 1;
}
$('search').addEventListener('input', () => { page = 0; schedule(); });
$('prev').addEventListener('click', () => { page--; schedule(); });
$('next').addEventListener('click', () => { page++; schedule(); });
$('node-rows').addEventListener('click', (e) => { const tr = e.target.closest('tr[data-node]'); if (tr) openDrawer(tr.dataset.node); });
$('node-rows').addEventListener('keydown', (e) => {
  const tr = e.target.closest('tr[data-node]');
  if (!tr) return;
  if (e.key === 'Enter') openDrawer(tr.dataset.node);
  if (e.key === 'ArrowDown' && tr.nextElementSibling) tr.nextElementSibling.focus();
  if (e.key === 'ArrowUp' && tr.previousElementSibling) tr.previousElementSibling.focus();
});

// ---- the drawer ----

async function openDrawer(name) {
  drawerNode = name;
  $('drawer-title').textContent = name;
  $('drawer-body').replaceChildren(el('p', { class: 'meta', text: 'loading…' }));
  $('drawer').hidden = false;
  const r = await api('/api/v1/nodes/' + encodeURIComponent(name));
  if (drawerNode !== name) return;
  if (!r.ok) { $('drawer-body').replaceChildren(el('p', { class: 'error', text: (r.body && r.body.error) || 'failed' })); return; }
  const n = r.body, st = n.status || {}, dl = el('dl');
  const row = (k, v) => dl.append(el('dt', { text: k }), el('dd', { text: v || '-' }));
  row('present', n.present ? 'yes' : 'no');
  row('labels', Object.entries((n.presence && n.presence.labels) || {}).map(([k, v]) => `${k}=${v}`).join(', '));
  row('phase', enumName(st.phase, 'NODE_PHASE_'));
  row('message', st.message);
  row('applied fingerprint', st.appliedFingerprint);
  row('status fingerprint', st.fingerprint);
  row('revision', n.revisionInForce ? `${n.revisionInForce} (in force: it runs the config this revision gives it)` : st.revision);
  if (n.revisionInForce && n.revisionInForce !== st.revision) row('status revision', `${st.revision || '-'} (the revision that last changed it)`);
  row('desired fingerprint', n.desired && n.desired.fingerprint);
  row('desired revision', n.desired && n.desired.revision);
  row('backup fingerprint', n.backup && n.backup.fingerprint);
  row('backup revision', n.backup && n.backup.revision);
  row('rollout', st.rollout);
  row('operation', st.operation);
  row('last update', st.lastUpdate);
  row('failed check', st.failedCheck);
  const kids = [dl];
  if (st.checkOutput) kids.push(el('h3', { text: 'check output' }), el('pre', { class: 'check-output', text: st.checkOutput }));
  if (st.lastInvalid) kids.push(el('h3', { text: 'last invalid' }), el('pre', { text: JSON.stringify(st.lastInvalid, null, 2) }));
  // Its rendered config against its backup, intent by intent.
  kids.push(el('h3', { text: 'desired config against the backup' }));
  if (!n.desired || !n.backup) kids.push(el('p', { class: 'meta', text: !n.desired ? 'no desired config stored' : 'no backup stored (the node had no config before)' }));
  else if (!n.diff.length) kids.push(el('p', { class: 'meta', text: 'the same intents' + (n.desired.fingerprint === n.backup.fingerprint ? ' (same fingerprint)' : '') }));
  else kids.push(el('ul', { class: 'config-diff' }, ...n.diff.map(d => el('li', { 'data-op': d.op },
    el('code', { text: `${d.op} ${d.intent}` }), d.op === '~' ? el('pre', { text: `- ${d.from}\n+ ${d.to}` }) : el('pre', { text: d.op === '+' ? '+ ' + d.to : '- ' + d.from })))));
  // Its operations: the node's own events, newest last.
  kids.push(el('h3', { text: 'operations' }));
  const cur = [n.desired && n.desired.operation && `desired: ${n.desired.operation}${n.desired.revert ? ' (revert)' : ''}${n.desired.cancel ? ' (cancelled)' : ''}`,
    st.operation && `status: ${st.operation}${st.progress ? ' — ' + st.progress : ''}`].filter(Boolean);
  if (cur.length) kids.push(el('p', { class: 'meta', text: cur.join(' · ') }));
  if (!n.operations.length) kids.push(el('p', { class: 'meta', text: 'no events of this node kept' }));
  else kids.push(el('ol', { class: 'node-ops' }, ...n.operations.map(se => el('li', { 'data-seq': String(se.seq), text: eventText(se) }))));
  const evs = el('button', { type: 'button', text: 'Filter the events feed to this node' });
  evs.addEventListener('click', () => { $('event-node').value = name; schedule(); $('events').scrollIntoView(); });
  kids.push(evs);
  $('drawer-body').replaceChildren(...kids);
}
$('drawer-close').addEventListener('click', () => { $('drawer').hidden = true; drawerNode = ''; });
document.addEventListener('keydown', (e) => { if (e.key === 'Escape') { $('drawer').hidden = true; drawerNode = ''; } });

// ---- the rollout ----

// The counts are the server's (contract.TallyOf, sent as tallies): the
// forward categories add up to the total, the revert's to the nodes
// touched, the operations to those attempted. The page adds nothing up.
// Stopped in flight names its nodes as the record does (the tally's names:
// a node stopped in flight is placed reverted once its revert is done, and
// only the record still says it stopped); revert failed, and a record that
// names none, as the map placed them.
const NAMED = ['stopped', 'revertFailed'];
// namedList is ": node-04, node-05 and 3 more" for the first 10 of names
// of counted nodes; '' for none.
function namedList(names, counted) {
  const shown = names.slice(0, 10);
  return shown.length ? `: ${shown.join(', ')}${counted > shown.length ? ` and ${counted - shown.length} more` : ''}` : '';
}
function countItem(c, stopped) {
  let text = `${c.words} ${c.n || 0}`;
  for (const of of c.of || []) if (of.n) text += ` (${of.n} ${of.words})`;
  if (NAMED.includes(c.key) && c.n) {
    let names = c.names || [], counted = c.n;
    if (!names.length) {
      names = [];
      for (const n of S.nodes.values()) if (n.state === c.key) names.push(n.node);
      names.sort();
      counted = names.length;
    }
    text += namedList(names, counted);
  }
  const li = el('li', { 'data-count': c.key, title: c.meaning || '', text });
  li.style.setProperty('--c', `var(${(STATES[c.key] || STATES.outside).color})`);
  return li;
}
// domainName is contract.DomainLabel with the strategy's label key, as
// `sluice rollout status` says it ("zone zone-a", "nodes without zone"):
// the record keeps a failure domain as its sort key ("0zone-a", "1").
function domainName(r, d) {
  const key = (r.strategy && r.strategy.failureDomain) || 'domain';
  return d === '1' ? `nodes without ${key}` : `${key} ${d.replace(/^0/, '')}`;
}
function renderRollout() {
  const r = S.rollouts.get(S.active) || newestRollout();
  if (!r) return;
  $('rollout-id').textContent = r.id + (r.id === S.active ? ' (active)' : '');
  const phase = enumName(r.phase, 'ROLLOUT_PHASE_');
  $('rollout-phase').textContent = phase + (r.reason ? ': ' + r.reason : '');
  $('rollout-phase').dataset.phase = phase;
  const meta = [`revision ${short(r.revision)}`];
  if (sourceLine(r)) meta.push('from ' + sourceLine(r));
  if (r.wave) meta.push(`wave ${r.wave}`);
  // The failure-domain stage in progress, named as the CLI names it.
  const ended = !['ROLLOUT_PHASE_PROGRESSING', 'ROLLOUT_PHASE_REVERTING'].includes(r.phase);
  const ds = !ended ? ((r.domains || []).length ? r.domains : r.domain ? [r.domain] : []) : [];
  if (ds.length) meta.push(ds.map(d => domainName(r, d)).join(', '));
  for (const g of r.gates || []) meta.push(`gate ${g.message} (${g.verdict}${g.before ? ' before ' + g.before : ''})`);
  $('rollout-meta').textContent = meta.join(' · ');
  // Countdowns: the bake, and a wait for a window or a freeze to end.
  const running = r.phase === 'ROLLOUT_PHASE_PROGRESSING';
  const bake = running && r.bakeUntil ? new Date(r.bakeUntil) - Date.now() : 0;
  // A pause holds the bake: bakeLeft (protojson "40s") stands still.
  const held = running && r.bakeLeft ? parseFloat(r.bakeLeft) * 1000 : 0;
  $('bake').hidden = bake <= 0 && held <= 0;
  $('bake').textContent = held > 0 ? `bake held by the pause: ${fmtDur(held)} left` :
    bake > 0 ? `baking: ${fmtDur(bake)} left (until ${new Date(r.bakeUntil).toLocaleTimeString()})` : '';
  const wait = running && r.waiting;
  $('waiting').hidden = !wait;
  // A gate's wait ends in failure at waitingUntil; a window's or freeze's in the next wave.
  const gateWait = wait && r.waiting.startsWith('waiting for gate ');
  $('waiting').textContent = wait ? r.waiting + (r.waitingUntil ? ` — ${gateWait ? 'fails in' : ''} ${fmtDur(new Date(r.waitingUntil) - Date.now())}${gateWait ? '' : ' to go'} (${gateWait ? 'at' : 'until'} ${new Date(r.waitingUntil).toLocaleString()})` : '') : '';
  renderTimeline(r, S.timelines.get(r.id));
  const t = S.tallies.get(r.id) || { total: 0, nodes: [], revert: [], operations: [] };
  const total = t.total || 0, stopped = r.phase !== 'ROLLOUT_PHASE_PROGRESSING';
  const bar = $('counts-bar');
  bar.replaceChildren(...t.nodes.map(c => {
    const s = el('span', { 'data-count': c.key, title: `${c.words} ${c.n || 0}` });
    s.style.width = total ? (100 * (c.n || 0) / total) + '%' : '0';
    s.style.background = `var(${(STATES[c.key] || STATES.outside).color})`;
    return s;
  }));
  // The first five always; stopped in flight and not started once the rollout stopped.
  const shown = t.nodes.filter((c, i) => i < 5 || c.n || (stopped && r.phase !== 'ROLLOUT_PHASE_SUCCEEDED'));
  $('counts').replaceChildren(...shown.map(c => countItem(c, stopped)));
  $('counts-revert').replaceChildren(...(t.revert || []).filter(c => c.n || c.key !== 'revertFailed').map(c => countItem(c, stopped)));
  $('counts-revert').hidden = !(t.revert || []).length;
  const ops = t.operations || [];
  $('operations').textContent = ops.length ? `operations ${t.attempted} attempted: ` + ops.map(c => `${c.n || 0} ${c.words}`).join(', ') : '';
  $('counts-sum').textContent = t.off ? t.off : `${total} of ${total} nodes accounted for` +
    ((t.revert || []).length ? `; the revert counts the ${t.touched} touched again` : '');
  $('counts-sum').dataset.off = String(!!t.off);
  renderFailures(r);
}

// fmtDur: 75000 → "1m15s"; a Go duration string ("1m15.5s") passes through.
function fmtDur(ms) {
  if (typeof ms === 'string') return ms;
  if (!(ms > 0)) return '0s';
  const s = Math.round(ms / 1000), h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
  return (h ? h + 'h' : '') + (h || m ? m + 'm' : '') + (s % 60) + 's';
}

// The timeline: each wave as the strategy plans it over the nodes the
// rollout changes (its width its share of them), filled as far as its
// nodes are done, with the stages the rollout actually ran in it (one per
// failure domain) under it; then the estimate against the ideal time. The
// numbers are view.RolloutTimeline's: an open stage counted from the
// rollout's counts, a wave past the nodes to change not needed.
const plural = (k, word) => `${k} ${word}${k === 1 ? '' : 's'}`;
const WAVE_STATES = {
  done: 'done', running: 'running', baking: 'done, baking before the next stage', planned: 'planned',
  unneeded: 'not needed: no node left to change', unreached: 'not reached: the rollout ended before it',
};
function renderTimeline(r, tl) {
  const box = $('timeline');
  if (!tl || !tl.plan) { box.replaceChildren(); $('eta').textContent = ''; return; }
  if (tl.error) { box.replaceChildren(el('li', { class: 'error', text: 'the strategy does not resolve: ' + tl.error })); return; }
  const total = tl.plan.reduce((a, p) => a + p.nodes, 0) || 1;
  box.replaceChildren(...tl.plan.map(p => {
    const bar = el('span', { class: 'plan-bar' });
    bar.style.width = Math.max(2, 100 * p.nodes / total) + '%';
    const fill = el('span', { class: 'plan-done' });
    fill.style.width = (p.nodes ? Math.min(100, 100 * p.done / p.nodes) : 0) + '%';
    bar.append(fill);
    const name = p.wave ? `wave ${p.wave}` : 'all nodes';
    const words = `${name}: ${plural(p.nodes, 'node')} planned, ${p.started} started, ${p.done} done${p.took ? ', took ' + p.took : ''} — ${WAVE_STATES[p.state] || p.state}`;
    const actual = (p.stages || []).filter(st => st.domain || p.wave);
    const sub = actual.length ? el('ul', { class: 'stage-actual' }, ...actual.map(st => el('li', { 'data-state': st.state, text:
      `${st.domain ? (tl.domainKey || 'domain') + ' ' + st.domain : 'stage'}: ${st.started} started, ${st.provisioned} provisioned, ${st.failed} failed${st.timedOut ? ' (' + st.timedOut + ' timed out)' : ''}${st.skipped ? ', ' + st.skipped + ' skipped' : ''}` +
      (st.state === 'done' ? (st.took ? `, ${st.took}` : '') : ' — ' + st.state) }))) : null;
    return el('li', { 'data-wave': String(p.wave), 'data-state': p.state }, el('span', { class: 'plan-words', text: words }), bar, sub);
  }));
  // A round is one batch of at most maxParallel nodes configured at once.
  const one = tl.maxParallel === 1;
  const scope = tl.changes === tl.total ? `${plural(tl.changes, 'node')} to change` : `${tl.changes} of ${plural(tl.total, 'node')} to change`;
  const parts = [`${scope}, ${one ? 'one at a time' : `up to ${tl.maxParallel} at a time (${plural(tl.rounds, 'round')})`}${tl.bake ? `, bake ${tl.bake} between ${tl.domainKey ? 'stages' : 'waves'}` : ''}`, `elapsed ${tl.elapsed}`];
  if (tl.round) parts.push(`pace ${tl.round} a ${one ? 'node' : 'round'}`);
  if (tl.eta) {
    const left = new Date(tl.eta) - Date.now();
    parts.push(`ETA ${new Date(tl.eta).toLocaleTimeString()} (${left > 0 ? 'in ' + fmtDur(left) : 'due'})`);
    parts.push(`expected ${tl.expected} against the ideal ${tl.ideal} (×${tl.ratio})`);
  } else if (tl.ideal) parts.push(`took ${tl.elapsed} against the ideal ${tl.ideal}`);
  else if (r.phase === 'ROLLOUT_PHASE_PROGRESSING') parts.push(tl.changes && !r.counts.attempted ? 'ETA once the first nodes finish' : 'ETA once the pace is known');
  $('eta').textContent = parts.join(' · ');
}

// Failures grouped by fingerprint: one group per bad config, its first
// failing node, the check and its output.
function renderFailures(r) {
  const groups = new Map();
  for (const f of r.failures || []) {
    const k = f.fingerprint || '(unknown fingerprint)';
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(f);
  }
  const box = $('failures');
  if (!groups.size) { box.replaceChildren(el('p', { class: 'meta', text: 'none' })); }
  else box.replaceChildren(...[...groups].map(([fp, fs]) => {
    const first = fs[0], rec = S.fps.get(fp);
    const output = first.output || (rec && rec.output) || first.message || '';
    return el('div', { class: 'fp-group', 'data-fingerprint': fp },
      el('p', {}, el('strong', { text: short(fp) }), ` — ${fs.length} node${fs.length === 1 ? '' : 's'}: `,
        el('span', { class: 'fp-nodes', text: fs.map(f => f.node).join(', ') })),
      el('p', { class: 'meta' }, 'first failing node ', el('span', { class: 'fp-first-node', text: first.node }),
        `, ${enumName(first.result, 'NODE_RESULT_')}, check `, el('span', { class: 'fp-check', text: first.failedCheck || (rec && rec.check) || '-' })),
      el('pre', { class: 'fp-output', text: output || '(no output)' }),
      fs === [...groups.values()][0] ? followed(r, first) : null);
  }));
  const fps = [...S.fps.values()].sort((a, b) => (b.time || '').localeCompare(a.time || ''));
  const fb = $('fingerprints');
  if (!fps.length) fb.replaceChildren(el('p', { class: 'meta', text: 'none' }));
  else fb.replaceChildren(...fps.map(f => {
    const forgive = el('button', { type: 'button', class: 'control', 'data-action': 'forgive', 'data-fingerprint': f.fingerprint, text: 'Forgive' });
    forgive.disabled = !(S.config && S.config.controls);
    return el('div', { class: 'fp-record', 'data-fingerprint': f.fingerprint },
      el('p', {}, el('strong', { text: short(f.fingerprint) }), ` ${f.cause || 'check-failed'} on ${f.node || '-'} (check ${f.check || '-'})`,
        f.forgiven ? ` — forgiven by ${f.forgiven.by}: ${f.forgiven.reason || ''}` : ' ', f.forgiven ? null : forgive));
  }));
}

// followed says what followed the rollout's first failure: "node-07 failed
// mgmt-reachable → 30 touched nodes reverted in 110 ms", timed from the
// first failing node's event to the rollout's end event when the page
// still keeps them (the record keeps no times of its own for it).
function followed(r, first) {
  const c = Object.fromEntries(((S.tallies.get(r.id) || {}).revert || []).map(x => [x.key, x.n || 0]));
  if (!c.reverted && !c.reverting && !c.revertFailed && r.phase !== 'ROLLOUT_PHASE_ABORTED') return null;
  let text = `${first.node} ${first.result === 'NODE_RESULT_TIMED_OUT' ? 'timed out' : 'failed ' + (first.failedCheck || enumName(first.result, 'NODE_RESULT_'))} → `;
  const parts = [];
  if (c.reverted || !(c.reverting || c.revertFailed)) parts.push(`${c.reverted || 0} touched node${c.reverted === 1 ? '' : 's'} reverted`);
  if (c.reverting) parts.push(`${c.reverting} reverting`);
  if (c.revertFailed) parts.push(`${c.revertFailed} revert${c.revertFailed === 1 ? '' : 's'} failed`);
  text += parts.join(', ');
  const evs = S.events.map(se => se.event).filter(e => e && e.rollout === r.id);
  const failedAt = evs.find(e => e.node === first.node && /^Node(Failed|Invalid|TimedOut|Refused)/.test(e.type || ''));
  const endedAt = evs.find(e => e.kind === 'rollout' && ['RolloutRolledBack', 'RolloutAborted', 'RolloutPartiallyFailed'].includes(e.type));
  if (failedAt && endedAt) text += ` in ${Math.max(0, new Date(endedAt.time) - new Date(failedAt.time))} ms`;
  else if (!r.finishedAt) text += ' so far';
  text += `; the rollout ${r.finishedAt ? 'ended' : 'is'} ${enumName(r.phase, 'ROLLOUT_PHASE_')}`;
  return el('p', { class: 'fp-followed', text });
}

// held says how 'sluice rollout pause' holds r, as sluice rollout status
// does: "held" once no node operation is in flight, "pausing" until then,
// "" when it is not paused (or ended).
function held(r) {
  const p = r.pause;
  if (!p || !p.paused || r.phase !== 'ROLLOUT_PHASE_PROGRESSING') return '';
  return Number((r.pauseAck || {}).generation || 0) >= Number(p.generation || 0) ? 'held' : 'pausing';
}
// renderHeld: the rollout shown, held by sluice rollout pause, says so
// under its phase — who, since when, why, and what resumes it.
function renderHeld() {
  const r = S.rollouts.get(S.active) || newestRollout(), box = $('rollout-held');
  const h = r ? held(r) : '';
  box.hidden = !h;
  box.dataset.held = h;
  if (!h) { box.textContent = ''; return; }
  const p = r.pause;
  const who = `paused by ${p.by || '?'}${p.at ? ' at ' + new Date(p.at).toLocaleTimeString() : ''}${p.reason ? ': ' + p.reason : ''}`;
  box.textContent = h === 'held' ? `Held: no node operation in flight, none starts until Resume rollout (sluice rollout resume) — ${who}` :
    `Pausing: no node operation starts; waiting for ${(r.pauseAck || {}).waitingFor || 'none'} — ${who}`;
}

// History: the rollouts newest first, as sluice get rollouts lists them
// (the newest 50). Each row that succeeded or partially failed can be gone
// back to (sluice rollout undo --to-revision ITS_REVISION); the head's
// rollout (sluice-revisions/head's generation and revision), when it rolled
// back, was aborted or partially failed, can be retried (sluice rollout
// retry acts on the head).
const RETRYABLE = ['ROLLOUT_PHASE_ROLLED_BACK', 'ROLLOUT_PHASE_ABORTED', 'ROLLOUT_PHASE_PARTIALLY_FAILED'];
const UNDOABLE = ['ROLLOUT_PHASE_SUCCEEDED', 'ROLLOUT_PHASE_PARTIALLY_FAILED'];
// A row's counts are the server's tally (contract.TallyOf), in the words
// of sluice rollout history: provisioned of the total, failed, then OTHER,
// the forward categories with no column of their own (the server's list),
// so that the row adds up to its total; reverted counts touched nodes again.
// Stopped in flight names its nodes from the tally (the record's names):
// the map says nothing of an older rollout's, and once reverted a node is
// placed reverted.
function tallyN(t, key) {
  for (const c of [...(t.nodes || []), ...(t.revert || [])]) if (c.key === key) return c.n || 0;
  return 0;
}
function otherText(t) {
  const parts = (t.other || []).map(c => `${c.words} ${c.n || 0}` + (c.key === 'stopped' ? namedList(c.names || [], c.n || 0) : ''));
  if (t.off) parts.push(t.off);
  return parts.length ? parts.join(', ') : '-';
}
// startedLine is when a rollout started, under its id (the row keeps its
// counts in view): today's as its time, an older one with its date too.
// sourceLine is where a rollout's head came from, in the words of
// contract.SourceLine: "git registry gitops commit 0123456789ab (Ada Admin:
// add tenant a)", "registry redis1"; '' for the API's.
function sourceLine(r) {
  const src = r.source || {};
  if (!src.registry) return '';
  const c = src.commit;
  if (!c) return 'registry ' + src.registry;
  return `git registry ${src.registry} commit ${(c.hash || '').slice(0, 12)} (${(c.author || '').split(' <')[0]}: ${c.subject || ''})`;
}
function startedLine(at) {
  if (!at) return null;
  const d = new Date(at), today = d.toDateString() === new Date().toDateString();
  return el('span', { class: 'row-started', title: d.toLocaleString(), text: 'started ' + (today ? d.toLocaleTimeString() : d.toLocaleString()) });
}
// renderHead says what sluice-revisions/head holds: the revision to roll
// out, its generation, when and why it moved, and whether a rollout of it
// started; an unreadable head is said to be unreadable, never "none".
function renderHead(hd, rs) {
  const p = $('head'), h = S.head;
  if (!h) { p.textContent = ''; p.dataset.head = ''; return; }
  if (h.unreadable) {
    p.dataset.head = 'unreadable';
    p.textContent = `head: unreadable (sluice-revisions/head: ${h.unreadable})`;
    return;
  }
  if (!hd) { p.dataset.head = 'none'; p.textContent = 'head: none (nothing applied yet)'; return; }
  const r = rs.find(r => r.revision === hd.revision && Number(r.generation || 0) === Number(hd.generation || 0));
  p.dataset.head = r ? 'rolled' : 'not-started';
  p.textContent = `head: revision ${short(hd.revision)} (generation ${hd.generation || 0})` +
    (hd.updatedAt ? `, moved ${new Date(hd.updatedAt).toLocaleString()}` : '') + (hd.reason ? `: ${hd.reason}` : '') +
    (hd.strategyLost ? ' (the head before it did not decode: its strategy is the default, not the operator\'s)' : '') +
    (r ? ` — rollout ${r.id}` : ' — no rollout of it has started yet');
}
let historyKey = '';
function renderHistory() {
  const rs = [...S.rollouts.values()].sort((a, b) => (b.startedAt || '').localeCompare(a.startedAt || '') || Number(b.generation || 0) - Number(a.generation || 0)).slice(0, 50);
  const controls = !!(S.config && S.config.controls);
  // Rebuilt only when a row changes: a focused button survives an update.
  // The head is sluice-revisions/head as stored, not the newest rollout's
  // revision: it moves before a coordinator starts its rollout. Undo to
  // its revision is refused ("is the head already"), so no row of it
  // offers Undo to this; Retry acts on the head's rollout.
  const hd = (S.head && S.head.head) || null, head = hd ? hd.revision || '' : '';
  const headRollout = (r) => !!hd && r.revision === hd.revision && Number(r.generation || 0) === Number(hd.generation || 0);
  renderHead(hd, rs);
  const key = controls + '|' + S.active + '|' + S.applied + '|' + JSON.stringify(S.head) + '|' + rs.map(r => r.id + r.phase + held(r) + JSON.stringify(S.tallies.get(r.id) || {})).join(',');
  if (key === historyKey) return;
  historyKey = key;
  $('history').replaceChildren(...rs.map((r, i) => {
    const t = S.tallies.get(r.id) || { total: 0, nodes: [], revert: [], other: [] }, actions = el('div', { class: 'row-actions' });
    if (UNDOABLE.includes(r.phase) && r.revision && r.revision !== head) {
      const b = el('button', { type: 'button', class: 'control', 'data-action': 'undo', 'data-revision': r.revision, text: 'Undo to this', 'aria-label': 'undo to revision ' + short(r.revision),
        title: `make revision ${r.revision} the head again (sluice rollout undo --to-revision)` });
      b.disabled = !controls;
      actions.append(b);
    }
    // The head's rollout; with the head unreadable, the newest (the
    // configurator decides what a retry then does).
    if (RETRYABLE.includes(r.phase) && (hd ? headRollout(r) : i === 0 && !!(S.head && S.head.unreadable))) {
      const b = el('button', { type: 'button', class: 'control', 'data-action': 'retry', text: 'Retry', title: 'roll the head out again (sluice rollout retry)' });
      b.disabled = !controls;
      actions.append(b);
    }
    const marks = [r.id === S.active && 'active', r.id === S.applied && 'in force'].filter(Boolean);
    return el('tr', { 'data-rollout': r.id, 'data-phase': enumName(r.phase, 'ROLLOUT_PHASE_') },
      el('th', { scope: 'row' }, r.id + (marks.length ? ` (${marks.join(', ')})` : ''), startedLine(r.startedAt),
        sourceLine(r) ? el('span', { class: 'row-source', text: 'from ' + sourceLine(r) }) : null, actions.childElementCount ? actions : null),
      el('td', { text: enumName(r.phase, 'ROLLOUT_PHASE_') + (held(r) ? ' (paused)' : '') }),
      el('td', { 'data-count': 'provisioned', text: `${tallyN(t, 'provisioned')}/${t.total || 0}` }),
      el('td', { 'data-count': 'failed', text: String(tallyN(t, 'failed')) }),
      el('td', { 'data-count': 'other', text: otherText(t) }),
      el('td', { 'data-count': 'reverted', text: String(tallyN(t, 'reverted')) }));
  }));
}

// The control plane: the coordinator (who leads, its term, since when —
// a term starts with a takeover —, how its lease runs out, the term
// before), the freezes and the registries with their pending deletions.
function renderPlane() {
  const c = S.coordinator, dl = $('coordinator');
  if (c) {
    const l = c.lease || {}, rows = [];
    const row = (k, v) => rows.push(el('dt', { text: k }), el('dd', { text: v || '-' }));
    if (l.holder) {
      row('leader', l.holder);
      row('term', l.epoch ? String(l.epoch) : 'being taken (the new leader publishes its term once its fence is written)');
      row('last takeover', l.acquiredAt ? `${new Date(l.acquiredAt).toLocaleString()} (${fmtDur(Date.now() - new Date(l.acquiredAt))} ago)` : '-');
      row('lease expiry', c.leaseTTL ? `${c.leaseTTL} after its last renewal (renewed every ${c.renew}; the server removes it then and a standby takes over)` : '-');
    } else {
      row('leader', 'none');
      row('lease', c.ended ? `${c.ended} at ${new Date(c.endedAt).toLocaleTimeString()}` : 'not held');
    }
    if (c.before && c.before.holder) row('term before', `${c.before.holder}${c.before.epoch ? ', term ' + c.before.epoch : ''}, from ${c.before.acquiredAt ? new Date(c.before.acquiredAt).toLocaleString() : '?'}`);
    row('instances', (c.instances || []).map(i => `${i.instance} (${i.role || '?'})`).join(', ') || 'none present');
    dl.replaceChildren(...rows);
  }
  // The pause: what is requested against what each service instance
  // acknowledged (the agents are counted: one per node).
  const p = S.pauseSummary, req = S.pause[0] || {}, gen = Number(req.generation || 0);
  if (p) $('pause-requested').textContent = `requested: ${p.requested}; reached by ${p.reached} of ${p.instances} instances` +
    (p.waiting && p.waiting.length ? ` (not yet: ${p.waiting.join(', ')})` : '');
  $('pause-instances').replaceChildren(...S.pause.slice(1).map(i => {
    const a = i.pause || {}, seen = Number(a.generation || 0);
    const state = !gen ? (seen ? `at generation ${seen}` : 'no pause seen') : seen >= gen ? `reached generation ${seen} (${a.paused ? 'paused' : 'running'})` :
      `at generation ${seen || 0} of ${gen}${a.waitingFor ? ': finishing ' + a.waitingFor : ''}`;
    return el('li', { 'data-instance': `${i.component}.${i.instance}`, 'data-reached': String(!gen || seen >= gen), text: `${i.component} ${i.instance}${i.role ? ' (' + i.role + ')' : ''}: ${state}` });
  }));
  const fb = $('freezes');
  if (!S.freezes.length) fb.replaceChildren(el('p', { class: 'meta', text: 'none' }));
  else fb.replaceChildren(...S.freezes.map(f => {
    const from = new Date(f.from), to = new Date(f.to), now = Date.now();
    const state = now >= to ? 'ended' : now >= from ? `in force, ${fmtDur(to - now)} left` : `from ${from.toLocaleString()}`;
    return el('p', { class: 'freeze', 'data-freeze': f.id, 'data-state': now >= from && now < to ? 'in-force' : 'not' },
      el('strong', { text: f.id }), ` ${state}, until ${to.toLocaleString()} — ${f.reason || ''} (by ${f.by || '-'})`);
  }));
  const rb = $('registries');
  if (!S.registries.length) rb.replaceChildren(el('p', { class: 'meta', text: 'none besides sluice apply' }));
  else rb.replaceChildren(...S.registries.map(g => {
    const lines = [el('p', {}, el('strong', { text: g.name }), ` ${g.kind || ''} ${g.location || ''} — ${enumName(g.state, 'REGISTRY_STATE_')}` +
      `${g.lastSync ? ', synced ' + new Date(g.lastSync).toLocaleTimeString() : ''}, ${g.intents || 0} intents, ${g.marked || 0} marked for deletion` + (g.error ? ': ' + g.error : ''))];
    const pend = g.pending || [];
    if (pend.length) lines.push(el('ul', { class: 'pending' }, ...pend.slice(0, 20).map(p => el('li', { 'data-intent': p.intent,
      text: `${p.intent}: missing since ${new Date(p.missingSince).toLocaleTimeString()}, marked for deletion ${new Date(p.effectiveAt) > Date.now() ? 'in ' + fmtDur(new Date(p.effectiveAt) - Date.now()) : 'now'}` })),
      pend.length > 20 ? el('li', { text: `and ${pend.length - 20} more` }) : null));
    if (g.held) lines.push(el('p', { class: 'error', text: `held: ${(g.held.intents || []).length} deletions wait for sluice registry confirm ${g.name} (${g.held.reason || ''})` }));
    return el('div', { class: 'registry', 'data-registry': g.name }, ...lines);
  }));
}

function renderHeader() {
  const l = S.leader || {};
  $('leader').textContent = l.holder ? `leader: ${l.holder} (epoch ${l.epoch || '?'}, since ${new Date(l.acquiredAt).toLocaleTimeString()})` : 'leader: none';
  const p = S.pauseSummary, ps = $('pause-state');
  if (p) {
    // Paused: a badge that names who, since when (local time) and why; the
    // request in sluice get pause's words is its title.
    const req = S.pause[0] || {};
    const what = p.paused ? `paused (generation ${req.generation || '?'})${req.by ? ' by ' + req.by : ''}${req.at ? ' since ' + new Date(req.at).toLocaleTimeString() : ''}${req.reason ? ': ' + req.reason : ''}` : p.requested;
    ps.textContent = `${p.paused ? '' : 'pause: '}${what} — reached by ${p.reached}/${p.instances}` + (p.waiting && p.waiting.length ? ` (waiting: ${p.waiting.join(', ')})` : '');
    ps.title = `${p.requested}; reached by ${p.reached} of ${p.instances} instances`;
    ps.dataset.paused = String(p.paused);
    ps.dataset.reached = String(p.reached === p.instances);
  }
}

// ---- events ----

function eventText(se) {
  if (!se.event) return `#${se.seq} unreadable: ${se.unreadable}`;
  const e = se.event;
  const t = e.time ? new Date(e.time).toLocaleTimeString() : '-';
  const refs = ['node', 'rollout'].filter(k => e[k] && !(e.kind === k && e.id === e[k])).map(k => `${k}=${e[k]}`);
  return `${t}  ${e.component || '-'}  ${e.type || '-'}  ${e.kind || '-'}/${e.id || '-'}  ${e.reason || ''}${refs.length ? ' (' + refs.join(' ') + ')' : ''}`;
}
let shownEvents = '';
const kindsShown = new Set();
function renderEvents() {
  const sel = $('event-kind');
  for (const se of S.events) {
    const k = se.event && se.event.kind;
    if (k && !kindsShown.has(k)) { kindsShown.add(k); sel.append(el('option', { value: k, text: k })); }
  }
  const kind = sel.value, q = $('event-filter').value.trim().toLowerCase();
  const node = $('event-node').value.trim(), ro = $('event-rollout').value.trim();
  // node and rollout match the event's fields exactly (or what it is about).
  const about = (e, k, v) => !v || e[k] === v || (e.kind === k && e.id === v);
  const list = S.events.filter(se => (!kind || (se.event && se.event.kind === kind)) && (!node || (se.event && about(se.event, 'node', node))) &&
    (!ro || (se.event && about(se.event, 'rollout', ro))) && (!q || eventText(se).toLowerCase().includes(q))).slice(-300);
  const key = [kind, q, node, ro, list.length ? list[list.length - 1].seq : 0, list.length].join('|');
  if (key === shownEvents) return;
  shownEvents = key;
  const ol = $('event-list');
  ol.replaceChildren(...list.map(se => el('li', { 'data-seq': String(se.seq), text: eventText(se) })));
  if ($('tail').checked) ol.scrollTop = ol.scrollHeight;
}
$('event-filter').addEventListener('input', schedule);
$('event-node').addEventListener('input', schedule);
$('event-rollout').addEventListener('input', schedule);
// The filters' suggestions: the nodes and rollouts the kept events name.
let suggested = 0;
function suggest() {
  if (S.events.length === suggested) return;
  suggested = S.events.length;
  const nodes = new Set(), rollouts = new Set();
  for (const se of S.events) { const e = se.event; if (!e) continue; if (e.node) nodes.add(e.node); if (e.rollout) rollouts.add(e.rollout); }
  $('event-nodes').replaceChildren(...[...nodes].sort().slice(0, 500).map(v => el('option', { value: v })));
  $('event-rollouts').replaceChildren(...[...rollouts].sort().map(v => el('option', { value: v })));
}
$('event-node').addEventListener('focus', suggest);
$('event-rollout').addEventListener('focus', suggest);
$('event-kind').addEventListener('change', schedule);

// ---- controls: each shows its sluice command, then runs it ----

let pending = null;
async function control(body) {
  return api('/api/v1/control', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
}
async function preview() {
  const r = await control(pending);
  $('confirm-error').textContent = r.ok ? '' : (r.body && r.body.error) || 'refused';
  $('confirm-command').textContent = r.ok ? r.body.command : '';
  $('confirm-run').disabled = !r.ok;
}
document.addEventListener('click', async (e) => {
  const b = e.target.closest('button.control');
  if (!b || b.disabled) return;
  const action = b.dataset.action;
  const r = S.rollouts.get(S.active);
  pending = { action };
  if (action.startsWith('rollout-') || action === 'abort') pending.rollout = r ? r.id : '';
  if (action === 'forgive') pending.fingerprint = b.dataset.fingerprint;
  if (action === 'undo' && b.dataset.revision) pending.revision = b.dataset.revision;
  $('confirm-title').textContent = pending.revision ? 'Undo to revision ' + short(pending.revision) : b.textContent;
  $('confirm-reason').value = '';
  $('confirm-norevert').checked = false;
  $('confirm-norevert-label').hidden = action !== 'abort';
  $('confirm-reason-label').hidden = action === 'undo' || action === 'retry';
  $('confirm-output').hidden = true;
  $('confirm-run').disabled = true;
  $('confirm').showModal();
  await preview();
});
for (const id of ['confirm-reason', 'confirm-norevert']) {
  $(id).addEventListener('input', () => {
    if (!pending) return;
    pending.reason = $('confirm-reason').value;
    pending.noRevert = $('confirm-norevert').checked;
    preview();
  });
}
$('confirm-run').addEventListener('click', async () => {
  $('confirm-run').disabled = true;
  $('confirm-error').textContent = 'running…';
  const r = await control(Object.assign({}, pending, { confirm: true }));
  $('confirm-error').textContent = r.ok ? '' : (r.body && r.body.error) || 'failed';
  const out = $('confirm-output');
  out.textContent = (r.body && r.body.output) || (r.ok ? 'done' : '');
  out.hidden = !out.textContent;
  out.dataset.ok = String(r.ok);
});
$('confirm-cancel').addEventListener('click', () => $('confirm').close());

window.addEventListener('resize', () => { S.layoutDirty = true; schedule(); });
// start connects once the API answers; without the token the login asks
// for it (and connects when it is given); an unreachable server is tried
// again every 2 s.
function start() {
  checkAuth().then(ok => { if (ok) connect(); else if (!$('login').open) setTimeout(start, 2000); });
}
start();
setInterval(schedule, 1000); // bake countdowns and ages move without updates
