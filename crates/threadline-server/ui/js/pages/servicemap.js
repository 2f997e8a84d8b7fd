// `/service-map?range=1h`: services and the calls between them (parent/child spans
// across services, joined across processes) and the models they call, laid out left
// to right by dagre, each edge labelled with its request rate, error rate and P99 over
// the range; a table below lists the same edges.
import dagre from '/ui/vendor/dagre.mjs';
import { html, useApi, useMemo, useState, qs, navigate, setTitle, ErrorBox, Loading, fmtMs, fmtNum, fmtPct, svgFit } from '../lib.js';
import { RANGES } from './search.js';

const fmtRate = (r) => (r >= 10 ? `${fmtNum(r)}/min` : `${fmtNum(r, 2)}/min`);
const edgeLabel = (e) => `${fmtRate(e.rate_per_min)} · ${fmtPct(e.error_rate)} err · p99 ${fmtMs(e.p99_ms)}`;

function layout(data) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'LR', nodesep: 24, ranksep: 60, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  const add = (id, label, kind) => g.setNode(id, { width: Math.max(120, label.length * 7 + 28), height: 38, label, kind });
  for (const s of data.services) add(`service:${s}`, s, 'service');
  for (const m of data.models) add(`model:${m}`, m, 'model');
  // Labels take room in the layout (dagre places them at the edge's x, y).
  data.edges.forEach((e, k) => g.setEdge(`service:${e.caller}`, `${e.target}:${e.callee}`,
    { ...e, label: edgeLabel(e), width: edgeLabel(e).length * 6 + 8, height: 14, labelpos: 'c' }, `e${k}`));
  dagre.layout(g);
  return g;
}

function MapGraph({ data }) {
  const g = useMemo(() => layout(data), [data]);
  const { width, height } = g.graph();
  return html`<div class="graph service-graph"><svg viewBox=${`0 0 ${width} ${height}`} preserveAspectRatio="xMinYMin meet"
    style=${svgFit(width, 1.4)}
    role="group" aria-label="Service map">
    <defs><marker id="map-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
      <path d="M 0 0 L 10 5 L 0 10 z" fill="currentColor" style="color:var(--fg2)" /></marker></defs>
    ${g.edges().map((id) => {
      const e = g.edge(id);
      const pts = e.points || [];
      const d = pts.map((p, k) => `${k ? 'L' : 'M'}${p.x},${p.y}`).join(' ');
      const bad = e.error_rate >= 0.05;
      return html`<g class="map-edge" data-caller=${e.caller} data-callee=${e.callee}>
        <path class="edge" d=${d} marker-end="url(#map-arrow)" style=${bad ? 'stroke:var(--err)' : ''} />
        <text class="edge-label" x=${e.x} y=${e.y + 4} text-anchor="middle" style=${bad ? 'fill:var(--err)' : ''}>${e.label}</text>
      </g>`;
    })}
    ${g.nodes().map((id) => {
      const n = g.node(id);
      const x = n.x - n.width / 2, y = n.y - n.height / 2;
      return html`<g class="node map-node" data-node=${id}>
        <rect x=${x} y=${y} width=${n.width} height=${n.height} rx=${n.kind === 'model' ? 14 : 4}
          style=${`stroke:var(--k-${n.kind === 'model' ? 'model' : 'route'})`} />
        <text class="kind" x=${x + 8} y=${y + 13}>${n.kind}</text>
        <text x=${x + 8} y=${y + 29}>${n.label}</text>
      </g>`;
    })}
  </svg></div>`;
}

export function ServiceMapPage() {
  setTitle('Service map');
  const range = new URLSearchParams(location.search).get('range') || '1h';
  const [form, setForm] = useState(range);
  const map = useApi(`/api/v1/service-map${qs({ since: range })}`);
  const d = map.data;
  const traces = (e) => `/traces${qs({ service: e.target === 'service' ? e.callee : e.caller, range })}`;
  return html`
    <h1>Service map</h1>
    <form class="toolbar" aria-label="Service map range" onSubmit=${(e) => { e.preventDefault(); navigate(`/service-map${qs({ range: form })}`); }}>
      <label for="range">Calls in
        <select id="range" name="range" value=${form} onChange=${(e) => setForm(e.target.value)}>
          ${RANGES.filter(([v]) => v && v !== 'custom').map(([v, l]) => html`<option value=${v}>${l}</option>`)}
        </select></label>
      <button class="primary" type="submit">Show</button>
    </form>
    <${ErrorBox} error=${map.error} />
    ${map.loading && !d ? html`<${Loading} what="service map" />` : null}
    ${d ? html`
      ${d.services.length ? html`<${MapGraph} data=${d} />` : html`<p class="empty">No service has sent spans yet.</p>`}
      ${d.edges.length ? html`<div class="table-wrap"><table class="grid" aria-label="Calls between services and to models">
        <thead><tr><th>Caller</th><th>Callee</th><th class="num">Calls</th><th class="num">Rate</th>
          <th class="num">Error rate</th><th class="num">P50</th><th class="num">P99</th><th></th></tr></thead>
        <tbody>${d.edges.map((e) => html`<tr class="map-row">
          <td>${e.caller}</td><td><span class="muted">${e.target}</span> ${e.callee}</td>
          <td class="num">${fmtNum(e.calls)}</td><td class="num">${fmtRate(e.rate_per_min)}</td>
          <td class="num">${e.errors ? html`<span class="pill err">${fmtPct(e.error_rate)}</span>` : fmtPct(0)}</td>
          <td class="num">${fmtMs(e.p50_ms)}</td><td class="num">${fmtMs(e.p99_ms)}</td>
          <td><a href=${traces(e)}>traces</a></td></tr>`)}
        </tbody></table></div>`
        : d.services.length ? html`<p class="empty">No call between services in this range.</p>` : null}` : null}`;
}
