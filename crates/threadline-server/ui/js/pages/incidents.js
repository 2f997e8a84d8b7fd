// `/incidents` (list, open / resolved) and `/incidents/{id}` (the metric around the
// onset, ranked causes with confidence and evidence, exemplar traces).
import { html, useApi, navigate, qs, enc, setTitle, ErrorBox, Loading, Stat, fmtMs, fmtPct, fmtTime, fmtNum,
  incidentUrl, lineageUrl, traceUrl } from '../lib.js';
import { Chart } from '../chart.js';

function fmtMetric(metric, v) {
  if (v === null || v === undefined) return '–';
  if (/rate|ratio/.test(metric) && metric !== 'request_rate') return fmtPct(v);
  if (/latency|ttft/.test(metric)) return fmtMs(v);
  return fmtNum(v, 2);
}

function Severity({ s }) {
  return html`<span class=${`pill ${s === 'critical' ? 'crit' : 'warn'}`}>${s}</span>`;
}

export function IncidentsPage() {
  setTitle('Incidents');
  const p = new URLSearchParams(location.search);
  const status = p.get('status') || '';
  const list = useApi('/api/v1/incidents');
  const all = list.data ? list.data.incidents : [];
  const shown = all.filter((i) => !status || i.status === status).sort((a, b) => b.onset_unix - a.onset_unix);
  return html`
    <h1>Incidents</h1>
    <div class="toolbar">
      <label for="inc-status">Status <select id="inc-status" value=${status} onChange=${(e) => navigate(`/incidents${qs({ status: e.target.value })}`)}>
        <option value="">All</option><option value="open">Open</option><option value="resolved">Resolved</option></select></label>
    </div>
    <${ErrorBox} error=${list.error} />
    ${list.loading ? html`<${Loading} what="incidents" />` : null}
    ${list.data ? html`<div class="table-wrap"><table class="grid" aria-label="Incidents">
      <thead><tr><th>Incident</th><th>Status</th><th>Route</th><th>Model</th><th>Metric</th><th>Onset</th>
        <th class="num" title="the detector's baseline and the value it flagged, at detection">Baseline → flagged</th><th>Severity</th></tr></thead>
      <tbody>${shown.map((i) => {
        const a = i.anomalies.find((x) => x.metric === i.metric) || i.anomalies[0] || {};
        return html`<tr>
          <td><a class="mono incident-link" href=${incidentUrl(i.id)}>${i.id}</a></td>
          <td><span class=${`pill ${i.status === 'open' ? 'err' : ''}`}>${i.status}</span></td>
          <td>${i.route ? html`<a href=${lineageUrl(`route:${i.route}`)}>${i.route}</a>` : '–'}</td>
          <td>${i.model || '–'}</td><td>${i.metric}</td><td class="mono">${i.onset}</td>
          <td class="num">${fmtMetric(i.metric, a.baseline)} → ${fmtMetric(i.metric, a.observed)}</td>
          <td><${Severity} s=${i.severity} /></td></tr>`;
      })}</tbody></table></div>
      ${shown.length === 0 ? html`<p class="empty">No incidents${status ? ` with status ${status}` : ''}.</p>` : null}` : null}`;
}

/** The lineage node a candidate names, when it is one (`kind:key`; attributes are `dim=value`). */
function candidateNode(c) {
  if (/^[a-z_]+:/.test(c.subject)) return c.subject;
  const m = c.subject.match(/^(adapter|instance|image|model|route)=(.+)$/);
  return m ? `${m[1]}:${m[2]}` : null;
}

export function IncidentPage({ id }) {
  setTitle(`Incident ${id}`);
  const rca = useApi(`/api/v1/rca?incident=${enc(id)}`);
  if (rca.error) return html`<h1>Incident <code>${id}</code></h1><${ErrorBox} error=${rca.error} />`;
  if (!rca.data) return html`<h1>Incident <code>${id}</code></h1><${Loading} what="root-cause analysis" />`;
  const r = rca.data;
  const inc = r.incident;
  const first = inc.anomalies.find((x) => x.metric === inc.metric) || inc.anomalies[0] || {};
  const others = inc.anomalies.filter((x) => x !== first);
  const before = r.metric_before === null || r.metric_before === undefined
    ? 'no requests' : fmtMetric(inc.metric, r.metric_before);
  return html`
    <h1>${inc.metric} on ${inc.route || inc.model} <span class="muted mono" style="font-size:13px">${inc.id}</span></h1>
    <div class="stats">
      <${Stat} k="status" v=${inc.status} />
      <${Stat} k="severity" v=${html`<${Severity} s=${inc.severity} />`} />
      <${Stat} k="onset" v=${inc.onset} />
      <${Stat} k="service" v=${inc.service || '–'} />
      <${Stat} k="detector: baseline → flagged (as listed)" v=${`${fmtMetric(inc.metric, first.baseline)} → ${fmtMetric(inc.metric, first.observed)}`} />
      <${Stat} k="hour before → during (the causes' window)" v=${`${before} → ${fmtMetric(inc.metric, r.metric_during)}`} />
      <${Stat} k="requests before / during" v=${`${fmtNum(r.requests_before)} / ${fmtNum(r.requests_during)}`} />
    </div>
    ${others.length ? html`<p class="also-anomalous">Also anomalous in this incident: ${others.map((a, k) => html`${k ? ', ' : ''}<b>${a.metric}</b> ${fmtMetric(a.metric, a.baseline)} → ${fmtMetric(a.metric, a.observed)} (onset ${a.onset})`)}</p>` : null}
    <p class="muted" style="font-size:12px">The detector compares each minute with its baseline (median of the minutes before); the causes are ranked on the hour before the onset against the minutes since.</p>
    <${OnsetChart} inc=${inc} />
    <h2>Ranked causes</h2>
    <p class="muted">confidence = ${r.confidence_formula}</p>
    <ol class="causes">
      ${r.candidates.map((c) => {
        const node = candidateNode(c);
        const ev = c.evidence || {};
        const exemplars = ev.exemplar_trace_ids || [];
        const contrast = ev.contrast && typeof ev.contrast === 'object' ? ev.contrast : ev;
        return html`<li class="cause">
          <div class="row"><b>${c.kind.replace(/_/g, ' ')}</b>
            ${node ? html`<a class="chip changed-node" href=${lineageUrl(node)}>${c.subject}</a>` : html`<code>${c.subject}</code>`}
            <span class="conf" style=${`width:${Math.round(c.confidence * 120)}px`} aria-hidden="true"></span>
            <span>confidence ${c.confidence.toFixed(2)}</span></div>
          ${c.explanation ? html`<div class="explanation">${c.explanation}</div>` : null}
          ${(ev.co_moving || []).length ? html`<div class="co-moving" style="font-size:12px">moves with it: ${ev.co_moving.map((m, k) =>
            html`${k ? ', ' : ''}<code title=${m.explanation || ''}>${m.subject}</code>`)}</div>` : null}
          <div class="muted" style="font-size:12px">
            ${Object.entries(c.scores || {}).map(([k, v]) => `${k} ${Number(v).toFixed(2)}`).join(' · ')}
            ${ev.changed_at ? ` · changed ${ev.changed_at} (${ev.minutes_before_onset} min before onset)` : ''}
            ${contrast.share_of_bad !== undefined ? ` · ${fmtPct(contrast.share_of_bad)} of bad requests vs ${fmtPct(contrast.share_of_requests)} of all` : ''}
            ${contrast.metric_during !== undefined && contrast.metric_during !== null ? ` · metric ${contrast.metric_before === null || contrast.metric_before === undefined ? 'no requests' : fmtMetric(inc.metric, contrast.metric_before)} → ${fmtMetric(inc.metric, contrast.metric_during)}` : ''}
          </div>
          ${ev.path ? html`<div style="font-size:12px">path: ${ev.path.map((n, k) => html`${k ? ' → ' : ''}<a href=${lineageUrl(n)}>${n}</a>`)}</div>` : null}
          ${(ev.rules || []).map((rule) => html`<div style="font-size:12px" class="muted">rule: ${rule}</div>`)}
          ${exemplars.length ? html`<div style="font-size:12px">exemplar traces: ${exemplars.map((t) =>
            html`<a class="mono exemplar" href=${traceUrl(t)}>${t.slice(0, 12)}…</a> `)}</div>` : null}
        </li>`;
      })}
    </ol>
    ${r.candidates.length === 0 ? html`<p class="empty">No candidate cause was found.</p>` : null}`;
}

function OnsetChart({ inc }) {
  const from = inc.onset_unix - 3600;
  const end = inc.end ? Date.parse(inc.end) / 1000 : inc.onset_unix + 1800;
  const to = Math.min(end + 1800, Math.floor(Date.now() / 1000));
  const filter = inc.route ? `&route=${enc(inc.route)}` : inc.model ? `&model=${enc(inc.model)}` : '';
  const m = useApi(`/api/v1/metrics?metric=${inc.metric}${filter}&from=${from}&to=${to}&step=60`);
  if (m.error) return html`<${ErrorBox} error=${m.error} />`;
  if (!m.data) return html`<${Loading} what="metric" />`;
  const series = m.data.series.map((s) => ({ label: inc.route || inc.model || 'all', points: s.points }));
  return html`<div style="max-width:900px"><${Chart} title=${`${inc.metric} around the onset`} unit=${m.data.unit} series=${series}
    bands=${[[inc.onset_unix, end]]} marker=${inc.onset_unix} height=${220} /></div>`;
}
