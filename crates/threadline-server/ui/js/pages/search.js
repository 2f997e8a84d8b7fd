// `/` and `/traces?…`: trace search. The query lives in the URL (same names as the
// API's parameters, plus `range=` for a preset time window); results newest first.
import { html, useState, useApi, navigate, qs, fmtMs, fmtNum, fmtCost, fmtTime, traceUrl, sessionUrl, ErrorBox, Loading,
  setTitle } from '../lib.js';
import { GetStarted } from '../getstarted.js';

const FIELDS = ['service', 'name', 'model', 'route', 'adapter', 'ab_group', 'session', 'user', 'min_duration',
  'max_duration', 'q'];
export const RANGES = [['', 'Any time'], ['15m', 'Last 15 minutes'], ['1h', 'Last hour'], ['6h', 'Last 6 hours'],
  ['24h', 'Last 24 hours'], ['7d', 'Last 7 days'], ['custom', 'Absolute range']];
const PRESETS = new Set(['15m', '1h', '6h', '24h', '7d']);

/** The page's filters as read from the URL. */
function readUrl() {
  const p = new URLSearchParams(location.search);
  const f = {};
  for (const k of FIELDS) f[k] = p.get(k) || '';
  f.errors = p.get('status') === 'error';
  f.range = p.get('range') || (p.get('from') || p.get('to') ? 'custom' : '');
  f.from = p.get('from') || '';
  f.to = p.get('to') || '';
  f.attrs = [...p.entries()].filter(([k]) => k.startsWith('attr.')).map(([k, v]) => `${k.slice(5)}=${v}`).join('\n');
  f.cursor = p.get('cursor') || '';
  return f;
}

/** A time of the URL (RFC 3339 with or without a zone, or unix seconds) as the UTC
 *  `YYYY-MM-DDTHH:MM` the range inputs show: an offset is converted, not dropped. */
export function utcInputValue(v) {
  if (!v) return '';
  const zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(v);
  const seconds = /^\d+(\.\d+)?$/.test(v);
  if (zoned || seconds) {
    const d = new Date(seconds ? Number(v) * 1000 : v);
    if (!Number.isNaN(d.getTime())) return d.toISOString().slice(0, 16);
  }
  return v.slice(0, 16);
}

function attrPairs(text) {
  return text.split(/\n|;/).map((l) => l.trim()).filter(Boolean).map((l) => {
    const i = l.indexOf('=');
    return i > 0 ? [l.slice(0, i).trim(), l.slice(i + 1).trim()] : null;
  }).filter(Boolean);
}

/** The page URL of a set of filters. */
function pageUrl(f, cursor) {
  const params = {};
  for (const k of FIELDS) params[k] = f[k].trim();
  params.status = f.errors ? 'error' : '';
  params.range = f.range === 'custom' ? '' : f.range;
  if (f.range === 'custom') { params.from = f.from; params.to = f.to; }
  let s = qs(params);
  const attrs = attrPairs(f.attrs).map(([k, v]) => `attr.${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  if (attrs.length) s += (s ? '&' : '?') + attrs.join('&');
  if (cursor) s += (s ? '&' : '?') + `cursor=${encodeURIComponent(cursor)}`;
  return `/traces${s}`;
}

/** The API URL of the page's filters. */
function apiUrl(f) {
  const params = { limit: 50 };
  for (const k of FIELDS) params[k] = f[k].trim();
  params.status = f.errors ? 'error' : '';
  const toApiTime = (v) => (v && !/[zZ]|[+-]\d\d:?\d\d$/.test(v) && v.includes('T') ? `${v.length === 16 ? `${v}:00` : v}Z` : v);
  // A preset is `since=` as the CLI's `--since` sends it: the server counts back from its clock.
  if (PRESETS.has(f.range)) params.since = f.range;
  if (f.range === 'custom') { params.from = toApiTime(f.from); params.to = toApiTime(f.to); }
  params.cursor = f.cursor;
  let s = qs(params);
  for (const [k, v] of attrPairs(f.attrs)) s += `&attr.${encodeURIComponent(k)}=${encodeURIComponent(v)}`;
  return `/api/v1/traces${s}`;
}

function Field({ id, label, value, onInput, placeholder, type = 'text', wide }) {
  return html`<label class=${wide ? 'wide' : ''} for=${id}>${label}
    <input id=${id} name=${id} type=${type} value=${value} placeholder=${placeholder || ''}
      onInput=${(e) => onInput(e.target.value)} /></label>`;
}

export function SearchPage() {
  setTitle('Traces');
  const fromUrl = readUrl();
  const [form, setForm] = useState(fromUrl);
  const [urlSeen, setUrlSeen] = useState(location.search);
  if (urlSeen !== location.search) { setUrlSeen(location.search); setForm(fromUrl); }
  const services = useApi('/api/v1/services');
  const result = useApi(apiUrl(fromUrl));
  const set = (k) => (v) => setForm({ ...form, [k]: v });
  const submit = (e) => { e.preventDefault(); navigate(pageUrl(form)); };
  const reset = () => navigate('/traces');
  const traces = result.data ? result.data.traces : [];
  // Nothing stored at all (not merely nothing matching): where to send data instead.
  const emptyStore = traces.length === 0 && !fromUrl.cursor && services.data && services.data.services.length === 0;
  return html`
    <h1>Traces</h1>
    <form class="filters" role="search" aria-label="Trace search" onSubmit=${submit}>
      <${Field} id="q" label="Text (span names, prompts, replies, errors)" value=${form.q} onInput=${set('q')} placeholder="e.g. charged twice" wide />
      <label for="service">Service
        <select id="service" name="service" value=${form.service} onChange=${(e) => set('service')(e.target.value)}>
          <option value="">Any service</option>
          ${(services.data ? services.data.services : []).map((s) => html`<option value=${s.name}>${s.name}</option>`)}
          ${form.service && !(services.data && services.data.services.some((s) => s.name === form.service))
            ? html`<option value=${form.service}>${form.service}</option>` : null}
        </select></label>
      <${Field} id="name" label="Span name" value=${form.name} onInput=${set('name')} />
      <${Field} id="model" label="Model (or its start)" value=${form.model} onInput=${set('model')} />
      <${Field} id="route" label="Route" value=${form.route} onInput=${set('route')} placeholder="/v1/chat" />
      <${Field} id="adapter" label="Adapter" value=${form.adapter} onInput=${set('adapter')} />
      <${Field} id="ab_group" label="A/B group" value=${form.ab_group} onInput=${set('ab_group')} />
      <${Field} id="session" label="Session" value=${form.session} onInput=${set('session')} />
      <${Field} id="user" label="User" value=${form.user} onInput=${set('user')} />
      <${Field} id="min_duration" label="Min duration" value=${form.min_duration} onInput=${set('min_duration')} placeholder="250ms" />
      <${Field} id="max_duration" label="Max duration" value=${form.max_duration} onInput=${set('max_duration')} placeholder="2s" />
      <label for="range">Time range
        <select id="range" name="range" value=${form.range} onChange=${(e) => set('range')(e.target.value)}>
          ${RANGES.map(([v, l]) => html`<option value=${v}>${l}</option>`)}
        </select></label>
      ${form.range === 'custom' ? html`
        <${Field} id="from" label="From (UTC)" type="datetime-local" value=${utcInputValue(form.from)} onInput=${set('from')} />
        <${Field} id="to" label="To (UTC)" type="datetime-local" value=${utcInputValue(form.to)} onInput=${set('to')} />` : null}
      <label class="wide" for="attrs">Attributes (KEY=VALUE, one per line)
        <textarea id="attrs" name="attrs" rows="1" value=${form.attrs} onInput=${(e) => set('attrs')(e.target.value)}
          placeholder="gen_ai.tool.name=lookup_account"></textarea></label>
      <label class="inline" for="errors"><input id="errors" type="checkbox" checked=${form.errors}
        onChange=${(e) => set('errors')(e.target.checked)} /> Errors only</label>
      <div class="actions">
        <button class="primary" type="submit">Search</button>
        <button type="button" onClick=${reset}>Clear</button>
      </div>
    </form>
    <${ErrorBox} error=${result.error} />
    ${result.loading && !result.data ? html`<${Loading} what="traces" />` : null}
    ${emptyStore ? html`<${GetStarted} />` : null}
    ${result.data && result.data.searched_from_unix_nano ? html`
      <p class="notice partial-search" role="status">Searched traces that started since${' '}<span class="mono">${fmtTime(result.data.searched_from_unix_nano)}</span>: this store answers a
        first page within its time budget, and older traces take longer to search.
        ${result.data.next_cursor ? html`<a class="search-older" href=${pageUrl(fromUrl, result.data.next_cursor)}>Search older traces →</a>` : null}</p>` : null}
    ${result.data && !emptyStore ? html`
      <div class="table-wrap"><table class="grid" aria-label="Traces, newest first">
        <thead><tr><th>Trace</th><th>Started</th><th>Root</th><th class="num">Duration</th>
          <th class="num">Spans</th><th>Models</th><th>Session</th><th>User</th><th class="num">Tokens</th><th class="num">Cost</th><th>Status</th></tr></thead>
        <tbody>
          ${traces.map((t) => html`<tr>
            <td><a class="mono trace-link" href=${traceUrl(t.trace_id)}>${t.trace_id.slice(0, 16)}…</a></td>
            <td class="mono">${fmtTime(t.start_time_unix_nano)}</td>
            <td><span class="muted">${t.root_service}</span> ${t.root_name}</td>
            <td class="num">${fmtMs(t.duration_ms)}</td>
            <td class="num">${fmtNum(t.span_count)}</td>
            <td>${t.models.map((m) => html`<span class="pill">${m}</span>`)}</td>
            <td>${t.session_id ? html`<a class="session-link" href=${sessionUrl(t.session_id)}>${t.session_id}</a>` : null}</td>
            <td>${t.user_id ? html`<a href=${pageUrl({ ...readUrl(), user: t.user_id, cursor: '' })}>${t.user_id}</a>` : null}</td>
            <td class="num">${fmtNum(t.total_tokens)}</td>
            <td class="num">${fmtCost(t.cost_usd)}</td>
            <td>${t.error ? html`<span class="pill err">error</span>` : html`<span class="pill ok">ok</span>`}</td>
          </tr>`)}
        </tbody></table></div>
      ${traces.length === 0 ? html`<p class="empty">No trace ${result.data.searched_from_unix_nano ? 'started since then ' : ''}matches these filters.</p>` : null}
      <div class="pager">
        ${fromUrl.cursor ? html`<a href=${pageUrl(fromUrl)}>First page</a>` : null}
        ${result.data.next_cursor ? html`<a class="next-page" href=${pageUrl(fromUrl, result.data.next_cursor)}>Next page →</a>` : null}
        <span class="muted">${traces.length} trace${traces.length === 1 ? '' : 's'} on this page</span>
      </div>` : null}`;
}
