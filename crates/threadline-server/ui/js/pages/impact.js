// `/impact/{node_id}?since=…`: what erasing or fixing a node affects downstream — the
// closure by kind, the requests served through it, and the policy's plan.
import { html, useApi, enc, setTitle, ErrorBox, Loading, Stat, fmtNum, fmtTime, lineageUrl, nodeName } from '../lib.js';

export function ImpactPage({ node }) {
  setTitle(`Impact ${node}`);
  const since = new URLSearchParams(location.search).get('since');
  const r = useApi(`/api/v1/impact/${enc(node)}${since ? `?since=${enc(since)}` : ''}`);
  if (r.error) return html`<h1>Impact of <code>${node}</code></h1><${ErrorBox} error=${r.error} />`;
  if (!r.data) return html`<h1>Impact of <code>${node}</code></h1><${Loading} what="impact" />`;
  const d = r.data;
  return html`
    <h1>Impact of <a href=${lineageUrl(node)}>${node}</a></h1>
    <div class="stats">
      <${Stat} k="affected nodes" v=${fmtNum(d.affected_count)} />
      <${Stat} k="requests served since" v=${fmtTime(d.since_unix_nano)} />
      <${Stat} k="requests (traces)" v=${fmtNum(d.requests_served.traces)} />
    </div>
    ${d.truncated ? html`<p class="muted">The closure was cut at its size limit.</p>` : null}
    <h2>Downstream by kind</h2>
    <dl class="kv impact-kinds">${Object.entries(d.affected).map(([kind, ids]) => html`<dt>${kind} (${ids.length})</dt>
      <dd>${ids.map((id) => html`<a class="chip" href=${lineageUrl(id)}>${nodeName(id)}</a>`)}</dd>`)}</dl>
    <h2>Requests served</h2>
    <table class="grid"><thead><tr><th>Through</th><th class="num">Traces</th></tr></thead>
      <tbody>${d.requests_served.by_node.map((b) => html`<tr><td><a href=${lineageUrl(b.node)}>${b.node}</a></td>
        <td class="num">${fmtNum(b.traces)}</td></tr>`)}</tbody></table>
    <h2>Plan</h2>
    <table class="grid plan"><thead><tr><th>Action</th><th>Node</th><th>Why</th></tr></thead>
      <tbody>${d.plan.map((p) => html`<tr><td><b>${p.action}</b></td><td><a href=${lineageUrl(p.node)}>${p.node}</a></td>
        <td>${p.reason}</td></tr>`)}</tbody></table>`;
}
