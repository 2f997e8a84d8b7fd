// `/dashboard?group_by=route|model|service|adapter|instance&range=…`: the LLM golden
// signals over time — first an overview comparing every series of each metric in one
// chart, then one block per series (busiest first, the top three open), incidents
// shaded.
import { html, useApi, navigate, qs, setTitle, ErrorBox, Loading } from '../lib.js';
import { Chart } from '../chart.js';

const GROUPS = ['route', 'model', 'service', 'adapter', 'instance'];
const RANGES = [['1h', 3600, 1], ['6h', 21600, 5], ['24h', 86400, 15], ['7d', 604800, 120]];
export const METRICS = [
  ['request_rate', 'Request rate'], ['error_rate', 'Error rate'], ['p50_latency', 'P50 latency'],
  ['p99_latency', 'P99 latency'], ['ttft_p99', 'Time to first token (P99)'], ['tokens_per_s', 'Tokens/s'],
  ['kv_cache_hit_ratio', 'KV-cache hit ratio'], ['cost', 'Cost'],
];

export function DashboardPage() {
  setTitle('Dashboard');
  const p = new URLSearchParams(location.search);
  const groupBy = GROUPS.includes(p.get('group_by')) ? p.get('group_by') : 'route';
  const range = RANGES.find((r) => r[0] === p.get('range')) || RANGES[1];
  const now = Math.floor(Date.now() / 60000) * 60;
  const from = p.get('from') ? Number(p.get('from')) : now - range[1];
  const to = p.get('to') ? Number(p.get('to')) : now;
  const stepMinutes = Number(p.get('step')) / 60 || range[2];
  const step = String(stepMinutes * 60);
  const set = (k, v) => { const q = Object.fromEntries(p.entries()); q[k] = v; if (k === 'range') { delete q.from; delete q.to; delete q.step; } navigate(`/dashboard${qs(q)}`); };
  const apiBase = `&group_by=${groupBy}&from=${from}&to=${to}&step=${step}`;
  const results = METRICS.map(([m]) => useApi(`/api/v1/metrics?metric=${m}${apiBase}`));
  const incidents = useApi(`/api/v1/incidents?from=${from}&to=${to}`);
  const err = results.find((r) => r.error);
  const first = results[0].data;
  // Series by volume: requests over the range (rate × step), busiest first.
  const volume = new Map(first ? first.series.map((s) => [s.labels[groupBy],
    s.points.reduce((a, pt) => a + (pt.value || 0), 0)]) : []);
  const keys = [...volume.keys()].sort((a, b) => volume.get(b) - volume.get(a) || String(a).localeCompare(String(b)));
  const allBands = incidents.data ? incidents.data.incidents
    .map((i) => [i.onset_unix, i.end ? Date.parse(i.end) / 1000 : to]) : [];
  return html`
    <h1>Dashboard</h1>
    <div class="toolbar">
      <label for="group-by">Group by <select id="group-by" value=${groupBy} onChange=${(e) => set('group_by', e.target.value)}>
        ${GROUPS.map((g) => html`<option value=${g}>${g}</option>`)}</select></label>
      <label for="dash-range">Time range <select id="dash-range" value=${p.get('from') ? '' : range[0]} onChange=${(e) => set('range', e.target.value)}>
        ${p.get('from') ? html`<option value="">Custom</option>` : null}
        ${RANGES.map(([r]) => html`<option value=${r}>Last ${r}</option>`)}</select></label>
      <span class="muted">${stepMinutes}-minute steps · shaded: incidents</span>
    </div>
    <${ErrorBox} error=${err && err.error} />
    ${!first ? html`<${Loading} what="metrics" />` : null}
    ${first && keys.length === 0 ? html`<p class="empty">No requests in this window.</p>` : null}
    ${keys.length > 1 ? html`<section class="overview" aria-label=${`Every ${groupBy}, busiest first`}>
      <h2>Every ${groupBy}, busiest first</h2>
      <div class="charts">
        ${METRICS.map(([m, label], k) => {
          const r = results[k].data;
          if (!r) return null;
          const byKey = new Map(r.series.map((s) => [s.labels[groupBy], s.points]));
          const series = keys.filter((key) => byKey.has(key)).map((key) => ({ label: key || '(none)', points: byKey.get(key) }));
          const hasValue = series.some((x) => x.points.some((pt) => pt.value !== null));
          return hasValue ? html`<${Chart} title=${label} unit=${r.unit} series=${series} bands=${allBands} height=${200} />` : null;
        })}
      </div></section>` : null}
    ${keys.map((key, rank) => {
      const bands = incidents.data ? incidents.data.incidents
        .filter((i) => groupBy !== 'route' || i.route === key)
        .filter((i) => groupBy !== 'model' || i.model === key)
        .map((i) => [i.onset_unix, i.end ? Date.parse(i.end) / 1000 : to]) : [];
      return html`<section class="series-row" aria-label=${`${groupBy} ${key}`}><details open=${rank < 3}>
        <summary><h2 style="display:inline">${groupBy} <code>${key || '(none)'}</code></h2></summary>
        <div class="charts">
          ${METRICS.map(([m, label], k) => {
            const r = results[k].data;
            const series = r ? r.series.filter((s) => s.labels[groupBy] === key).map((s) => ({ label: key || '(none)', points: s.points })) : [];
            const hasValue = series.some((x) => x.points.some((pt) => pt.value !== null));
            return hasValue ? html`<${Chart} title=${label} unit=${r.unit} series=${series} bands=${bands} height=${150} />` : null;
          })}
        </div>
      </details></section>`;
    })}`;
}
