// `/sessions`: conversations, newest activity first, with their user, turns, tokens,
// cost and errors (filter by user and time range). `/sessions/{session_id}`: the
// traces of one conversation in order, with totals.
import { html, useApi, useState, enc, qs, navigate, setTitle, ErrorBox, Loading, Stat, fmtMs, fmtNum, fmtCost, fmtTime,
  traceUrl, sessionUrl } from '../lib.js';
import { RANGES } from './search.js';

export function SessionsPage() {
  setTitle('Sessions');
  const p = new URLSearchParams(location.search);
  const user = p.get('user') || '';
  const range = p.get('range') ?? '24h';
  const [form, setForm] = useState({ user, range });
  const list = useApi(`/api/v1/sessions${qs({ user, since: range && range !== 'custom' ? range : '' })}`);
  const submit = (e) => { e.preventDefault(); navigate(`/sessions${qs({ user: form.user.trim(), range: form.range })}`); };
  const rows = list.data ? list.data.sessions : [];
  return html`
    <h1>Sessions</h1>
    <form class="toolbar" role="search" aria-label="Session filters" onSubmit=${submit}>
      <label for="user">User <input id="user" name="user" value=${form.user} placeholder="user id"
        onInput=${(e) => setForm({ ...form, user: e.target.value })} /></label>
      <label for="range">Active in
        <select id="range" name="range" value=${form.range} onChange=${(e) => setForm({ ...form, range: e.target.value })}>
          ${RANGES.filter(([v]) => v !== 'custom').map(([v, l]) => html`<option value=${v}>${l}</option>`)}
        </select></label>
      <button class="primary" type="submit">Show</button>
    </form>
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="sessions" />` : null}
    ${list.data ? html`
      <div class="table-wrap"><table class="grid" aria-label="Sessions, newest activity first">
        <thead><tr><th>Session</th><th>User</th><th class="num">Traces</th><th class="num">Tokens</th>
          <th class="num">Cost</th><th class="num">Errors</th><th>Started</th><th>Last activity</th></tr></thead>
        <tbody>${rows.map((s) => html`<tr>
          <td><a class="session-link" href=${sessionUrl(s.session_id)}>${s.session_id}</a></td>
          <td>${s.user_id ? html`<a href=${`/sessions${qs({ user: s.user_id, range })}`}>${s.user_id}</a>` : html`<span class="muted">–</span>`}</td>
          <td class="num">${fmtNum(s.trace_count)}${s.truncated ? '+' : ''}</td>
          <td class="num">${fmtNum(s.total_tokens)}</td>
          <td class="num">${fmtCost(s.cost_usd)}</td>
          <td class="num">${s.error_count ? html`<span class="pill err">${s.error_count}</span>` : '0'}</td>
          <td class="mono">${fmtTime(s.start_time_unix_nano)}</td>
          <td class="mono">${fmtTime(s.last_activity_unix_nano)}</td></tr>`)}
        </tbody></table></div>
      ${rows.length === 0 ? html`<p class="empty">No session in this range. Sessions come from spans that carry
        <code>session.id</code> or <code>gen_ai.conversation.id</code>.</p>` : null}` : null}`;
}

export function SessionPage({ id }) {
  setTitle(`Session ${id}`);
  const s = useApi(`/api/v1/sessions/${enc(id)}`);
  if (s.error) return html`<h1>Session <code>${id}</code></h1><${ErrorBox} error=${s.error} />`;
  if (!s.data) return html`<h1>Session <code>${id}</code></h1><${Loading} what="session" />`;
  const d = s.data;
  return html`
    <h1>Session <code>${id}</code></h1>
    <p><a href="/sessions">All sessions</a>${d.user_id ? html` · user <a href=${`/traces${qs({ user: d.user_id })}`}>${d.user_id}</a>` : null}
      · <a href=${`/traces${qs({ session: id })}`}>as a trace search</a></p>
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
