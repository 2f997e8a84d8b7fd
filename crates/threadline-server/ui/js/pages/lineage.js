// `/lineage/{node_id}?depth=N&direction=both|upstream|downstream`: a node's upstream
// and downstream graph laid out left to right by dagre (data flows left to right),
// with drift and open-incident badges and a side panel (facets, health, impact plan).
import dagre from '/ui/vendor/dagre.mjs';
import { html, useApi, useMemo, useState, useRef, useEffect, navigate, qs, enc, setTitle, ErrorBox, Loading, fmtTime,
  lineageUrl, impactUrl, nodeKind, nodeName, svgFit } from '../lib.js';

export const KIND_CLASS = {
  dataset: 'dataset', dataset_version: 'dataset', job: 'run', run: 'run', model: 'model', model_version: 'model',
  adapter: 'adapter', deployment: 'deploy', image: 'deploy', instance: 'deploy', route: 'route',
};
export const kindColor = (kind) => `var(--k-${KIND_CLASS[kind] || 'other'})`;
const SHAPE_RADIUS = { dataset: 14, run: 2, model: 6, adapter: 6, deploy: 0, route: 14, other: 4 };

function layout(data) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'LR', nodesep: 18, ranksep: 70, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of data.nodes) {
    // Long keys keep both ends: run ids and versions differ at the end as often as at
    // the start.
    const label = n.key.length > 40 ? `${n.key.slice(0, 18)}…${n.key.slice(-18)}` : n.key;
    g.setNode(n.id, { width: Math.max(110, label.length * 7 + 24), height: 40, label, node: n });
  }
  data.edges.forEach((e, k) => {
    if (g.hasNode(e.src) && g.hasNode(e.dst)) g.setEdge(e.src, e.dst, { kind: e.kind, superseded: e.superseded_unix_nano }, `e${k}`);
  });
  dagre.layout(g);
  return g;
}

function Graph({ data, center, openRoutes, depth, direction, onPick, picked }) {
  const g = useMemo(() => layout(data), [data]);
  const { width, height } = g.graph();
  const nodes = g.nodes().map((id) => ({ id, ...g.node(id) }));
  const edges = g.edges().map((e) => ({ ...e, ...g.edge(e) }));
  return html`<svg viewBox=${`0 0 ${width} ${height}`} preserveAspectRatio="xMinYMin meet"
    style=${svgFit(width, 1.6)}
    role="group" aria-label="Lineage graph">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
      <path d="M 0 0 L 10 5 L 0 10 z" fill="currentColor" style="color:var(--fg2)" /></marker></defs>
    ${edges.map((e) => {
      const pts = e.points || [];
      const d = pts.map((p, k) => `${k ? 'L' : 'M'}${p.x},${p.y}`).join(' ');
      const mid = pts[Math.floor(pts.length / 2)] || { x: 0, y: 0 };
      const label = e.superseded ? `${e.kind} (until ${fmtTime(e.superseded)})` : e.kind;
      return html`<g class=${e.superseded ? 'superseded' : ''}><path class="edge" d=${d} marker-end="url(#arrow)"
        stroke-dasharray=${e.superseded ? '4 4' : null} style=${e.superseded ? 'opacity:.55' : ''} />
        <text class="edge-label" x=${mid.x} y=${mid.y - 3} text-anchor="middle">${label}</text></g>`;
    })}
    ${nodes.map((n) => {
      const kind = n.node.kind;
      const cls = KIND_CLASS[kind] || 'other';
      const drift = n.node.props && n.node.props.drift && (n.node.props.drift.changes || []).length;
      const incident = kind === 'route' && openRoutes.has(n.node.key);
      const x = n.x - n.width / 2, y = n.y - n.height / 2;
      const go = () => onPick(n.id);
      return html`<g class=${`node ${n.id === center ? 'center' : ''}`} data-node=${n.id} tabindex="0" role="button"
          aria-label=${`${kind} ${n.node.key}${drift ? ', drifted' : ''}${incident ? ', open incident' : ''}`}
          onClick=${go} onKeyDown=${(e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); go(); } }}>
        <rect x=${x} y=${y} width=${n.width} height=${n.height} rx=${SHAPE_RADIUS[cls]} style=${`stroke:${kindColor(kind)}`}
          stroke-dasharray=${kind === 'run' || kind === 'job' ? '5 3' : null} />
        ${n.id === picked ? html`<rect x=${x - 3} y=${y - 3} width=${n.width + 6} height=${n.height + 6} rx=${SHAPE_RADIUS[cls] + 2} style="fill:none;stroke:var(--accent);stroke-width:1.5" />` : null}
        <text class="kind" x=${x + 8} y=${y + 13}>${kind}</text>
        <text x=${x + 8} y=${y + 30}>${n.label}</text>
        ${drift ? html`<text class="badge drift-badge" x=${x + n.width - 6} y=${y + 13} text-anchor="end" style="fill:var(--warn)">drift</text>` : null}
        ${incident ? html`<text class="badge incident-badge" x=${x + n.width - 6} y=${y + 13} text-anchor="end" style="fill:var(--err)">incident</text>` : null}
      </g>`;
    })}
  </svg>`;
}

function NodePanel({ node, nodes }) {
  const n = nodes.find((x) => x.id === node);
  const health = useApi(`/api/v1/node-health/${enc(node)}`);
  const impact = useApi(`/api/v1/impact/${enc(node)}`);
  if (!n) return null;
  return html`<aside class="panel node-panel" aria-label="Node detail">
    <h2>${nodeName(node)}</h2>
    <p><span class="pill" style=${`color:${kindColor(n.kind)}`}>${n.kind}</span>
      <a href=${lineageUrl(node)}>centre here</a> · <a href=${impactUrl(node)}>impact</a></p>
    <dl class="kv"><dt>first seen</dt><dd>${fmtTime(n.first_seen_unix_nano)}</dd>
      <dt>last seen</dt><dd>${fmtTime(n.last_seen_unix_nano)}</dd></dl>
    <h3>Health</h3>
    ${health.data ? html`<p class="health">score <b>${health.data.score.toFixed(2)}</b> · ${health.data.status}</p>
      <ul>${health.data.factors.map((f) => html`<li>${f.reason || f.kind || JSON.stringify(f)}</li>`)}</ul>`
      : health.error ? html`<p class="muted">${health.error.message}</p>` : html`<${Loading} />`}
    ${n.props && n.props.drift ? html`<h3>Drift</h3><pre class="block">${JSON.stringify(n.props.drift, null, 2)}</pre>` : null}
    <h3>Impact plan</h3>
    ${impact.data ? html`<p>${impact.data.affected_count} affected downstream · ${impact.data.requests_served.traces.toLocaleString('en-US')} requests served</p>
      <ul>${impact.data.plan.slice(0, 8).map((p) => html`<li><b>${p.action}</b> <a href=${lineageUrl(p.node)}>${p.node}</a></li>`)}</ul>
      ${impact.data.plan.length > 8 ? html`<a href=${impactUrl(node)}>all ${impact.data.plan.length} steps</a>` : null}`
      : impact.error ? html`<p class="muted">${impact.error.message}</p>` : html`<${Loading} />`}
    <h3>Properties and facets</h3>
    <pre class="block">${JSON.stringify(n.props, null, 2)}</pre>
  </aside>`;
}

export function LineagePage({ node }) {
  setTitle(`Lineage ${node}`);
  const p = new URLSearchParams(location.search);
  const depth = Math.max(1, Math.min(10, Number(p.get('depth')) || 3));
  const direction = ['upstream', 'downstream', 'both'].includes(p.get('direction')) ? p.get('direction') : 'both';
  const g = useApi(`/api/v1/lineage/${enc(node)}?direction=${direction}&depth=${depth}`);
  const incidents = useApi('/api/v1/incidents');
  const [picked, setPicked] = useState(node);
  const box = useRef();
  // Bring the centre node into view once the graph is drawn.
  useEffect(() => {
    const el = box.current;
    const c = el && el.querySelector('.node.center rect');
    if (!c) return;
    const r = c.getBBox();
    el.scrollLeft = r.x + r.width / 2 - el.clientWidth / 2;
    el.scrollTop = r.y + r.height / 2 - el.clientHeight / 2;
  }, [g.data]);
  const openRoutes = new Set(incidents.data ? incidents.data.incidents.filter((i) => i.status === 'open').map((i) => i.route) : []);
  const setParam = (k, v) => navigate(`/lineage/${enc(node)}${qs({ depth, direction, [k]: v })}`);
  const kinds = [...new Set(Object.values(KIND_CLASS))];
  return html`
    <h1><span class="muted">${nodeKind(node)}</span> ${nodeName(node)}</h1>
    <div class="toolbar">
      <label for="depth">Depth <select id="depth" value=${depth} onChange=${(e) => setParam('depth', e.target.value)}>
        ${[1, 2, 3, 4, 5, 6, 8, 10].map((d) => html`<option value=${d}>${d}</option>`)}</select></label>
      <label for="direction">Direction <select id="direction" value=${direction} onChange=${(e) => setParam('direction', e.target.value)}>
        <option value="both">Both</option><option value="upstream">Upstream</option><option value="downstream">Downstream</option></select></label>
      <div class="legend" aria-label="Node kinds">${kinds.map((k) => html`<span><i style=${`background:var(--k-${k})`}></i>${k}</span>`)}</div>
    </div>
    <${ErrorBox} error=${g.error} />
    ${g.loading && !g.data ? html`<${Loading} what="lineage" />` : null}
    ${g.data ? html`<div class="lineage-wrap">
      <div class="graph" ref=${box}>${g.data.nodes.length ? html`<${Graph} data=${g.data} center=${node} openRoutes=${openRoutes}
        depth=${depth} direction=${direction} picked=${picked}
        onPick=${(id) => { if (id === picked) navigate(`${lineageUrl(id)}${qs({ depth, direction })}`); else setPicked(id); }} />`
        : html`<p class="empty">No lineage for this node.</p>`}</div>
      <${NodePanel} node=${picked} nodes=${g.data.nodes} />
    </div>
    <p class="muted">Click a node to see it in the side panel; click it again (or Enter twice) to re-centre the graph on it.</p>` : null}`;
}
