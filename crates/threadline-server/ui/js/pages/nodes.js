// `/lineage?kind=KIND&q=TEXT`: the lineage browser — every node of a kind (datasets,
// jobs, runs, models, adapters, images, instances, routes …) whose name contains the
// text, most recently seen first, with drift, failed-run and incident badges; each
// opens its graph.
import { html, useApi, useState, qs, navigate, setTitle, ErrorBox, Loading, fmtTime, lineageUrl, incidentUrl } from '../lib.js';
import { kindColor } from './lineage.js';

const KINDS = [['dataset', 'Datasets'], ['dataset_version', 'Dataset versions'], ['job', 'Jobs'], ['run', 'Runs'],
  ['model', 'Models'], ['model_version', 'Model versions'], ['adapter', 'Adapters'], ['prompt', 'Prompts'],
  ['deployment', 'Deployments'], ['image', 'Images'], ['instance', 'Instances'], ['route', 'Routes'],
  ['service', 'Services']];

function Badge({ b }) {
  const cls = b.kind === 'incident' ? 'err' : b.kind === 'drift' ? 'warn' : 'err';
  if (b.kind === 'incident' && b.incidents && b.incidents.length) {
    return html`<a class=${`pill ${cls} badge-${b.kind}`} href=${incidentUrl(b.incidents[0])}>${b.text}</a>`;
  }
  return html`<span class=${`pill ${cls} badge-${b.kind}`}>${b.text}</span>`;
}

export function LineageBrowserPage() {
  setTitle('Lineage');
  const p = new URLSearchParams(location.search);
  const kind = p.get('kind') || '';
  const text = p.get('q') || '';
  const [q, setQ] = useState(text);
  const path = `/api/v1/nodes${qs({ kind, q: text, limit: 200 })}`;
  const list = useApi(path);
  const stale = list.path !== path;
  const go = (k, t) => navigate(`/lineage${qs({ kind: k, q: t })}`);
  const counts = list.data ? list.data.counts : {};
  const nodes = list.data ? list.data.nodes : [];
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  return html`
    <h1>Lineage</h1>
    <form class="toolbar" role="search" aria-label="Find lineage nodes" onSubmit=${(e) => { e.preventDefault(); go(kind, q.trim()); }}>
      <label for="node-q">Name contains <input id="node-q" name="q" value=${q} placeholder="fin-qa, llama, /v1/chat …"
        onInput=${(e) => setQ(e.target.value)} /></label>
      <button class="primary" type="submit">Find</button>
    </form>
    <nav class="kind-tabs" aria-label="Node kinds">
      <a href=${`/lineage${qs({ q: text })}`} class=${kind === '' ? 'active' : ''} aria-current=${kind === '' ? 'page' : null}>All <span class="muted">${total}</span></a>
      ${KINDS.filter(([k]) => counts[k] || k === kind).map(([k, label]) => html`
        <a href=${`/lineage${qs({ kind: k, q: text })}`} class=${kind === k ? 'active' : ''} aria-current=${kind === k ? 'page' : null}
          data-kind=${k}>${label} <span class="muted">${counts[k] || 0}</span></a>`)}
    </nav>
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="nodes" />` : null}
    ${list.data ? html`
      <div class="table-wrap"><table class="grid" aria-label="Lineage nodes, most recently seen first"
        aria-busy=${stale ? 'true' : 'false'} data-kind=${stale ? null : kind || 'all'}>
        <thead><tr><th>Kind</th><th>Name</th><th>Flags</th><th>First seen</th><th>Last seen</th><th></th></tr></thead>
        <tbody>${nodes.map((n) => html`<tr>
          <td><span class="kind-dot" style=${`background:${kindColor(n.kind)}`}></span> ${n.kind}</td>
          <td><a class="node-link" href=${lineageUrl(n.id)} data-node=${n.id}>${n.key}</a></td>
          <td>${n.badges.map((b) => html`<${Badge} b=${b} />`)}</td>
          <td class="mono">${fmtTime(n.first_seen_unix_nano)}</td>
          <td class="mono">${fmtTime(n.last_seen_unix_nano)}</td>
          <td><a href=${`/impact/${encodeURIComponent(n.id)}`}>impact</a></td></tr>`)}
        </tbody></table></div>
      ${nodes.length === 0 ? html`<p class="empty">${total === 0
        ? html`No lineage yet. Lineage comes from OpenLineage events (<code>POST /api/v1/lineage</code>), a registry
            manifest (<code>threadline register platform.yaml</code>) and the routes, instances, adapters and models
            your spans name.`
        : 'No node matches.'}</p>` : null}` : null}`;
}
