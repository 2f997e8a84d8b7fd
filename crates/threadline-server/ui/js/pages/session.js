// `/sessions/{session_id}`: the traces of one conversation in order, with totals.
import { html, useApi, enc, setTitle, ErrorBox, Loading, Stat, fmtMs, fmtNum, fmtCost, fmtTime, traceUrl } from '../lib.js';

export function SessionPage({ id }) {
  setTitle(`Session ${id}`);
  const s = useApi(`/api/v1/sessions/${enc(id)}`);
  if (s.error) return html`<h1>Session <code>${id}</code></h1><${ErrorBox} error=${s.error} />`;
  if (!s.data) return html`<h1>Session <code>${id}</code></h1><${Loading} what="session" />`;
  const d = s.data;
  return html`
    <h1>Session <code>${id}</code></h1>
    <div class="stats">
      <${Stat} k="turns (traces)" v=${fmtNum(d.trace_count)} />
      <${Stat} k="started" v=${fmtTime(d.start_time_unix_nano)} />
      <${Stat} k="span of time" v=${fmtMs(d.duration_ms)} />
      <${Stat} k="spans" v=${fmtNum(d.span_count)} />
      <${Stat} k="errors" v=${fmtNum(d.error_count)} />
      <${Stat} k="tokens" v=${fmtNum(d.total_tokens)} />
      <${Stat} k="cost" v=${fmtCost(d.cost_usd)} />
    </div>
    ${d.truncated ? html`<p class="muted">Showing the first ${d.trace_count} traces.</p>` : null}
    <div class="table-wrap"><table class="grid" aria-label="Traces of the session, in order">
      <thead><tr><th>#</th><th>Trace</th><th>Started</th><th>Root</th><th class="num">Duration</th><th>Models</th>
        <th class="num">Tokens</th><th class="num">Cost</th><th>Status</th></tr></thead>
      <tbody>${d.traces.map((t, k) => html`<tr>
        <td class="num">${k + 1}</td>
        <td><a class="mono trace-link" href=${traceUrl(t.trace_id)}>${t.trace_id.slice(0, 16)}…</a></td>
        <td class="mono">${fmtTime(t.start_time_unix_nano)}</td>
        <td><span class="muted">${t.root_service}</span> ${t.root_name}</td>
        <td class="num">${fmtMs(t.duration_ms)}</td>
        <td>${t.models.map((m) => html`<span class="pill">${m}</span>`)}</td>
        <td class="num">${fmtNum(t.total_tokens)}</td><td class="num">${fmtCost(t.cost_usd)}</td>
        <td>${t.error ? html`<span class="pill err">error</span>` : html`<span class="pill ok">ok</span>`}</td></tr>`)}
      </tbody></table></div>`;
}
