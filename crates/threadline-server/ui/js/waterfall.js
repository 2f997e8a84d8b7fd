// The trace waterfall for traces of any size: a flattened, virtualized tree of
// fixed-height rows (only the rows on screen are in the DOM), a canvas minimap of the
// whole trace, big repeated sibling groups folded with counts until expanded, and a
// search that keeps each match's ancestors.
import { html, useState, useEffect, useRef, useMemo, useLayoutEffect, fmtUs } from './lib.js';

const ROW = 24;
/** Siblings sharing a name and service are folded into one row from this many on. */
export const FOLD_MIN = 10;
const OVERSCAN = 12;

/** Index structures over the skeleton's columns. */
export function indexSkeleton(sk) {
  const s = sk.spans;
  const n = s.span_id.length;
  const children = Array.from({ length: n }, () => []);
  const roots = [];
  for (let i = 0; i < n; i++) {
    const p = s.parent[i];
    if (p >= 0) children[p].push(i); else roots.push(i);
  }
  const total = Math.max(1, sk.duration_ms * 1000);
  const byId = new Map();
  for (let i = 0; i < n; i++) byId.set(s.span_id[i], i);
  return { s, n, children, roots, total, byId, names: sk.names, services: sk.services, models: sk.models };
}

/** Sibling lists with big (name, service) groups folded: items are span indices or groups. */
function foldChildren(ix, kids, parentKey) {
  if (kids.length < FOLD_MIN) return kids;
  const counts = new Map();
  for (const k of kids) {
    const key = `${ix.s.name[k]}:${ix.s.service[k]}`;
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  const out = [];
  const groups = new Map();
  for (const k of kids) {
    const key = `${ix.s.name[k]}:${ix.s.service[k]}`;
    if (counts.get(key) < FOLD_MIN) { out.push(k); continue; }
    let g = groups.get(key);
    if (!g) { g = { group: `${parentKey}/${key}`, members: [] }; groups.set(key, g); out.push(g); }
    g.members.push(k);
  }
  return out;
}

/** The visible rows: depth-first, honouring collapsed spans, folded groups and a filter. */
export function flatten(ix, collapsed, expandedGroups, keep) {
  const rows = [];
  const stack = [];
  const push = (items, depth) => { for (let j = items.length - 1; j >= 0; j--) stack.push([items[j], depth]); };
  push(foldChildren(ix, ix.roots, 'root'), 0);
  while (stack.length) {
    const [item, depth] = stack.pop();
    if (typeof item === 'number') {
      if (keep && !keep.has(item)) continue;
      rows.push({ i: item, depth });
      if (!collapsed.has(item)) push(foldChildren(ix, ix.children[item], String(item)), depth + 1);
    } else {
      const members = keep ? item.members.filter((m) => keep.has(m)) : item.members;
      if (members.length === 0) continue;
      const open = expandedGroups.has(item.group) || (keep && members.length < FOLD_MIN);
      if (open) push(members, depth);
      else rows.push({ group: item.group, members, depth });
    }
  }
  return rows;
}

/** Matches of `needle` (name, service or span id) and all their ancestors. */
export function searchKeep(ix, needle) {
  const q = needle.trim().toLowerCase();
  if (!q) return null;
  const keep = new Set();
  const matches = new Set();
  const nameHit = ix.names.map((x) => x.toLowerCase().includes(q));
  const svcHit = ix.services.map((x) => x.toLowerCase().includes(q));
  for (let i = 0; i < ix.n; i++) {
    if (nameHit[ix.s.name[i]] || svcHit[ix.s.service[i]] || ix.s.span_id[i] === q) {
      matches.add(i);
      for (let a = i; a >= 0 && !keep.has(a); a = ix.s.parent[a]) keep.add(a);
    }
  }
  return { keep, matches };
}

/** Where a bar's duration label goes: after the bar, before it, or inside it. */
function labelPlace(left, width) {
  if (left + width < 78) return `left:calc(${left + width}% + 4px)`;
  if (left > 22) return `right:calc(${100 - left}% + 4px)`;
  return `left:calc(${left}% + 6px);color:#fff;text-shadow:0 0 2px #000`;
}

export function serviceColor(k) {
  // Hues start at blue and skip the reds that mean errors.
  const hue = (210 + k * 137.508) % 360;
  return `hsl(${hue < 20 || hue > 340 ? (hue + 60) % 360 : hue}, 62%, 52%)`;
}

function Minimap({ ix, scroll, viewH, totalH, onJump }) {
  const ref = useRef();
  useEffect(() => {
    const c = ref.current;
    const w = c.clientWidth || 800;
    const h = 44;
    c.width = w; c.height = h;
    const g = c.getContext('2d');
    g.clearRect(0, 0, w, h);
    const { s, n, total } = ix;
    for (let i = 0; i < n; i++) {
      g.fillStyle = s.error[i] ? '#e5534b' : serviceColor(s.service[i]);
      const x = (s.start_us[i] / total) * w;
      g.fillRect(x, Math.floor((i / n) * h), Math.max(1, (s.duration_us[i] / total) * w), 1);
    }
  }, [ix]);
  const frac = totalH > 0 ? Math.min(1, viewH / totalH) : 1;
  const top = totalH > 0 ? scroll / totalH : 0;
  return html`<div style="position:relative">
    <canvas ref=${ref} class="wf-minimap" aria-label="Minimap of all spans; click to jump"
      onClick=${(e) => { const r = e.currentTarget.getBoundingClientRect(); onJump((e.clientY - r.top) / r.height); }}></canvas>
    <div style=${`position:absolute;left:0;right:0;top:${top * 44}px;height:${Math.max(3, frac * 44)}px;border:1px solid var(--accent);pointer-events:none`}></div>
  </div>`;
}

function Axis({ total }) {
  const ticks = [0, 0.25, 0.5, 0.75, 1];
  return html`<div class="wf-head"><div style="padding-left:6px">Span</div>
    <div class="wf-axis">${ticks.map((t) => html`<span style=${`left:${Math.min(97, Math.max(3, t * 100))}%`}>${fmtUs(t * total)}</span>`)}</div></div>`;
}

export function Waterfall({ ix, selected, onSelect, reveal }) {
  const [collapsed, setCollapsed] = useState(() => new Set());
  const [groups, setGroups] = useState(() => new Set());
  const [needle, setNeedle] = useState('');
  const [critical, setCritical] = useState(true);
  const [scroll, setScroll] = useState(0);
  const [viewH, setViewH] = useState(600);
  const body = useRef();
  const found = useMemo(() => searchKeep(ix, needle), [ix, needle]);
  // A span to reveal (from the URL): open the folded groups holding it.
  useEffect(() => {
    if (reveal === undefined || reveal < 0) return;
    const chain = [];
    for (let a = reveal; a >= 0; a = ix.s.parent[a]) chain.push(a);
    const need = new Set(groups);
    for (const a of chain) {
      const p = ix.s.parent[a];
      const key = `${p >= 0 ? p : 'root'}/${ix.s.name[a]}:${ix.s.service[a]}`;
      need.add(key);
    }
    setGroups(need);
    const c = new Set(collapsed);
    chain.slice(1).forEach((a) => c.delete(a));
    setCollapsed(c);
  }, [reveal]);
  const rows = useMemo(() => flatten(ix, collapsed, groups, found && found.keep), [ix, collapsed, groups, found]);
  // Timing marks for `threadline bench ui`: the first screen of rows, and each redraw
  // of the rows (a group expanded, a search).
  useEffect(() => { performance.mark('threadline:waterfall-shown'); }, []);
  useEffect(() => { performance.mark('threadline:rows-changed'); }, [rows]);
  const totalH = rows.length * ROW;
  useLayoutEffect(() => {
    const el = body.current;
    if (!el) return;
    setViewH(el.clientHeight);
    if (reveal !== undefined && reveal >= 0) {
      const at = rows.findIndex((r) => r.i === reveal);
      if (at >= 0 && (at * ROW < el.scrollTop || at * ROW > el.scrollTop + el.clientHeight - ROW)) {
        el.scrollTop = Math.max(0, at * ROW - el.clientHeight / 3);
        setScroll(el.scrollTop);
      }
    }
  }, [rows.length, reveal]);
  const first = Math.max(0, Math.floor(scroll / ROW) - OVERSCAN);
  const last = Math.min(rows.length, Math.ceil((scroll + viewH) / ROW) + OVERSCAN);
  const toggle = (i) => { const c = new Set(collapsed); c.has(i) ? c.delete(i) : c.add(i); setCollapsed(c); };
  const openGroup = (g) => { const c = new Set(groups); c.add(g); setGroups(c); };
  const selRow = rows.findIndex((r) => r.i === selected);
  const onKey = (e) => {
    const move = (d) => {
      const at = Math.max(0, Math.min(rows.length - 1, (selRow < 0 ? -1 : selRow) + d));
      const r = rows[at];
      if (r && r.i !== undefined) onSelect(r.i);
      const el = body.current;
      if (at * ROW < el.scrollTop) el.scrollTop = at * ROW;
      else if ((at + 1) * ROW > el.scrollTop + el.clientHeight) el.scrollTop = (at + 1) * ROW - el.clientHeight;
      e.preventDefault();
    };
    if (e.key === 'ArrowDown') move(1);
    else if (e.key === 'ArrowUp') move(-1);
    else if ((e.key === 'ArrowLeft' || e.key === 'ArrowRight') && selected >= 0) {
      const isCollapsed = collapsed.has(selected);
      if ((e.key === 'ArrowLeft') !== isCollapsed) toggle(selected);
      e.preventDefault();
    }
  };
  const { s, total } = ix;
  const visible = [];
  for (let r = first; r < last; r++) {
    const row = rows[r];
    const top = r * ROW;
    const indent = { paddingLeft: `${4 + row.depth * 14}px` };
    if (row.group) {
      const m = row.members;
      let start = Infinity, end = 0, errs = 0, dur = 0;
      for (const k of m) { start = Math.min(start, s.start_us[k]); end = Math.max(end, s.start_us[k] + s.duration_us[k]); errs += s.error[k]; dur += s.duration_us[k]; }
      const k0 = m[0];
      visible.push(html`<div class="wf-row wf-group-row" role="treeitem" aria-level=${row.depth + 1} aria-expanded="false"
          style=${`top:${top}px`} onClick=${() => openGroup(row.group)} key=${row.group}>
        <div class="wf-name" style=${indent}>
          <button type="button" class="tg expand-group" aria-label=${`Expand ${m.length} ${ix.names[s.name[k0]]} spans`}>▸</button>
          <span class="wf-group nm">${m.length.toLocaleString('en-US')} × ${ix.names[s.name[k0]]}</span>
          <span class="svc">${ix.services[s.service[k0]]} · Σ ${fmtUs(dur)}</span>
          ${errs ? html`<span class="err">${errs} errors</span>` : null}
        </div>
        <div class="wf-bar-cell"><div class="wf-bar" style=${`left:${(start / total) * 100}%;width:${((end - start) / total) * 100}%;background:repeating-linear-gradient(90deg, ${serviceColor(s.service[k0])} 0 2px, transparent 2px 4px)`}></div></div>
      </div>`);
      continue;
    }
    const i = row.i;
    const kids = s.children[i];
    const left = (s.start_us[i] / total) * 100;
    const width = (s.duration_us[i] / total) * 100;
    const cls = `wf-row${i === selected ? ' sel' : ''}${found && found.matches.has(i) ? ' match' : ''}`;
    visible.push(html`<div class=${cls} role="treeitem" aria-level=${row.depth + 1} aria-selected=${i === selected}
        aria-expanded=${kids ? !collapsed.has(i) : null} style=${`top:${top}px`} key=${i} data-span=${s.span_id[i]}
        onClick=${() => onSelect(i)}>
      <div class="wf-name" style=${indent}>
        ${kids ? html`<button type="button" class="tg" tabindex="-1" aria-label=${collapsed.has(i) ? 'Expand' : 'Collapse'}
            onClick=${(e) => { e.stopPropagation(); toggle(i); }}>${collapsed.has(i) ? '▸' : '▾'}</button>`
          : html`<span class="tg"></span>`}
        ${s.error[i] ? html`<span class="err" title="error">!</span>` : null}
        <span class="nm">${ix.names[s.name[i]]}</span>
        <span class="svc">${ix.services[s.service[i]]}${kids ? ` (${kids})` : ''}</span>
      </div>
      <div class="wf-bar-cell">
        <div class=${`wf-bar${s.error[i] ? ' err' : ''}${critical && s.critical[i] ? ' crit' : ''}`}
          style=${`left:${left}%;width:${width}%;background:${serviceColor(s.service[i])}`}></div>
        <span class="wf-bar-label" style=${labelPlace(left, width)}>${fmtUs(s.duration_us[i])}${s.self_us[i] < s.duration_us[i] ? ` (self ${fmtUs(s.self_us[i])})` : ''}</span>
      </div>
    </div>`);
  }
  return html`<div class="wf">
    <div class="wf-tools">
      <label class="inline" for="trace-search"><span class="visually-hidden">Search in trace</span>
        <input id="trace-search" type="search" placeholder="Find span (name, service, id)" value=${needle}
          onInput=${(e) => setNeedle(e.target.value)} /></label>
      ${found ? html`<span class="muted">${found.matches.size.toLocaleString('en-US')} matching spans</span>` : null}
      <label class="inline" for="crit"><input id="crit" type="checkbox" checked=${critical} onChange=${(e) => setCritical(e.target.checked)} /> Critical path</label>
      <button type="button" onClick=${() => { setCollapsed(new Set()); setGroups(new Set()); }}>Reset folding</button>
      <span class="muted">${rows.length.toLocaleString('en-US')} rows</span>
    </div>
    <${Minimap} ix=${ix} scroll=${scroll} viewH=${viewH} totalH=${totalH}
      onJump=${(f) => { body.current.scrollTop = f * totalH - viewH / 2; }} />
    <${Axis} total=${total} />
    <div class="wf-body" ref=${body} tabindex="0" style=${`height:min(64vh, ${Math.max(120, totalH + 6)}px)`} role="tree" aria-label="Spans of the trace" onKeyDown=${onKey}
      onScroll=${(e) => setScroll(e.currentTarget.scrollTop)}>
      <div style=${`height:${totalH}px;position:relative`}>${visible}</div>
    </div>
  </div>`;
}
