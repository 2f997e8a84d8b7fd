// `/traces/{trace_id}[?span=ID]`: the trace. Loads the skeleton of every span first,
// then a span's full detail when it is opened (the selection lives in the URL).
import { html, useState, useMemo, useEffect, useApi, api, navigate, fmtMs, fmtNum, fmtCost, fmtTime, fmtUs, lineageUrl,
  sessionUrl, enc, ErrorBox, Loading, Stat, NodeChip, setTitle, nodeKind, nodeName } from '../lib.js';
import { Waterfall, indexSkeleton } from '../waterfall.js';

function selectedFromUrl() { return new URLSearchParams(location.search).get('span') || ''; }

export function TracePage({ id }) {
  setTitle(`Trace ${id.slice(0, 8)}`);
  const sk = useApi(`/api/v1/traces/${enc(id)}/skeleton`);
  const ix = useMemo(() => (sk.data ? indexSkeleton(sk.data) : null), [sk.data]);
  const spanId = selectedFromUrl();
  const selected = ix && spanId ? (ix.byId.get(spanId) ?? -1) : -1;
  const [revealed, setRevealed] = useState(selected);
  const select = (i) => {
    navigate(`/traces/${id}?span=${ix.s.span_id[i]}`, true);
  };
  if (sk.error) return html`<h1>Trace <code>${id}</code></h1><${ErrorBox} error=${sk.error} />`;
  if (!ix) return html`<h1>Trace <code>${id}</code></h1><${Loading} what="trace" />`;
  const d = sk.data;
  // The root (first span without a parent) names the trace.
  const root = ix.roots[0];
  if (revealed !== selected && selected >= 0 && revealed < 0) setRevealed(selected);
  return html`
    <h1>${ix.names[ix.s.name[root]]} <span class="muted mono" style="font-size:13px">${id}</span></h1>
    ${d.session_id || d.user_id ? html`<p class="trace-context">
      ${d.session_id ? html`Session <a class="session-link" href=${sessionUrl(d.session_id)}>${d.session_id}</a>` : null}
      ${d.session_id && d.user_id ? ' · ' : null}
      ${d.user_id ? html`User <a class="user-link" href=${`/traces?user=${enc(d.user_id)}`}>${d.user_id}</a>` : null}</p>` : null}
    <div class="stats">
      <${Stat} k="started" v=${fmtTime(d.start_time_unix_nano)} />
      <${Stat} k="duration" v=${fmtMs(d.duration_ms)} />
      <${Stat} k="spans" v=${fmtNum(d.span_count)} />
      <${Stat} k="services" v=${d.services.length} />
      <${Stat} k="errors" v=${fmtNum(d.error_count)} />
      <${Stat} k="tokens" v=${fmtNum(d.total_tokens)} />
      <${Stat} k="cost" v=${fmtCost(d.cost_usd)} />
    </div>
    <${BehindResponse} id=${id} />
    <div class="split">
      <${Waterfall} ix=${ix} selected=${selected} onSelect=${select} reveal=${revealed} />
      <aside class="panel span-panel" aria-label="Span detail">
        ${selected >= 0 ? html`<${SpanPanel} traceId=${id} spanId=${spanId} ix=${ix} i=${selected} />`
          : html`<p class="muted">Select a span to see its attributes, events, links and, for LLM calls, the conversation.</p>`}
      </aside>
    </div>`;
}

/** "What is behind this response": the request → dataset chain. */
function BehindResponse({ id }) {
  const [open, setOpen] = useState(false);
  const chain = useApi(open ? `/api/v1/traces/${enc(id)}/lineage` : null);
  const order = [['routes', 'Route'], ['deployments', 'Deployment'], ['instances', 'Instance'], ['images', 'Image'],
    ['prompts', 'Prompt version'], ['adapters', 'Adapter'], ['model_versions', 'Model version'], ['models', 'Base model'],
    ['training_runs', 'Training run'], ['dataset_versions', 'Dataset version'], ['datasets', 'Dataset']];
  return html`<div style="margin-bottom:10px">
    <button type="button" class="behind" aria-expanded=${open} onClick=${() => setOpen(!open)}>What is behind this response?</button>
    ${open ? html`<div class="panel behind-panel" style="margin-top:8px">
      <${ErrorBox} error=${chain.error} />
      ${chain.loading ? html`<${Loading} what="lineage" />` : null}
      ${chain.data ? html`<dl class="kv">
        ${order.filter(([k]) => (chain.data.chain[k] || []).length).map(([k, label]) => html`
          <dt>${label}</dt><dd>${chain.data.chain[k].map((n) => html`<a class="chip" href=${lineageUrl(n)}>${nodeName(n)}</a>`)}</dd>`)}
        ${(chain.data.chain.traced_runs || []).length ? html`<dt>Pipeline runs traced here</dt><dd>${chain.data.chain.traced_runs.map((r) =>
          html`<a class="chip" href=${lineageUrl(typeof r === 'string' ? r : r.run)}>${typeof r === 'string' ? r : r.run}</a>`)}</dd>` : null}
      </dl>` : null}
    </div>` : null}
  </div>`;
}

function Kv({ obj }) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return html`<p class="muted">none</p>`;
  return html`<dl class="kv">${entries.map(([k, v]) => html`<dt>${k}</dt><dd>${typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v)}</dd>`)}</dl>`;
}

function Conversation({ conv }) {
  if (!conv || !conv.messages.length) return html`<p class="muted">No message text was recorded on this span.</p>`;
  return html`<div class="msgs conversation">
    ${conv.messages.map((m) => html`<div class=${`msg ${m.role}`}>
      <div class="role">${m.role}${m.output ? ' · response' : ''}${m.tool_call_id ? ` · answers ${m.tool_call_id}` : ''}</div>
      ${m.content ? html`<pre>${m.content}</pre>` : null}
      ${m.tool_calls.map((c) => html`<div class="tool-call"><span class="pill">tool call</span> <b>${c.name}</b>
        ${c.id ? html`<span class="muted mono">${c.id}</span>` : null}<pre>${c.arguments}</pre></div>`)}
    </div>`)}
    <p class="muted" style="font-size:11px">carried by: ${conv.sources.join(', ')}</p>
  </div>`;
}

// A span's log records (OTLP logs carrying its ids), oldest first.
function Logs({ logs }) {
  if (!logs.length) return html`<p class="muted">none</p>`;
  return html`<table class="grid logs" aria-label="Logs of this span">
    <thead><tr><th>Time</th><th>Severity</th><th>Event</th><th>Body</th></tr></thead>
    <tbody>${logs.map((l) => html`<tr>
      <td class="mono">${fmtTime(l.time_unix_nano)}</td>
      <td><span class=${`pill ${l.severity_number >= 17 ? 'err' : ''}`}>${l.severity || '—'}</span></td>
      <td class="mono">${l.event_name || ''}</td>
      <td><pre class="log-body">${typeof l.body === 'string' ? l.body : JSON.stringify(l.body)}</pre>
        ${Object.keys(l.attributes).length ? html`<details><summary class="muted">attributes</summary><${Kv} obj=${l.attributes} /></details>` : null}</td>
    </tr>`)}</tbody>
  </table>`;
}

function LlmPanel({ llm, conv }) {
  const chips = [];
  if (llm.adapter_id) chips.push(['adapter', llm.adapter_id, `adapter:${llm.adapter_id}`]);
  if (llm.instance_id) chips.push(['instance', llm.instance_id, `instance:${llm.instance_id}`]);
  if (llm.image) chips.push(['image', llm.image, `image:${llm.image}`]);
  if (llm.prompt_template_version) {
    const p = llm.prompt_template_id ? `${llm.prompt_template_id}@${llm.prompt_template_version}` : llm.prompt_template_version;
    chips.push(['prompt', p, `prompt:${p}`]);
  }
  if (llm.route) chips.push(['route', llm.route, `route:${llm.route}`]);
  const model = llm.request_model || llm.response_model;
  if (model) chips.push(['model', model, `model:${model}`]);
  return html`<section class="llm-panel" aria-label="LLM call">
    <h3>LLM call</h3>
    <div class="chips">${chips.map(([k, label, node]) => html`<${NodeChip} kind=${k} label=${label} node=${node} />`)}</div>
    <div class="stats">
      <${Stat} k="input tokens" v=${fmtNum(llm.input_tokens)} />
      <${Stat} k="output tokens" v=${fmtNum(llm.output_tokens)} />
      ${llm.ttft_ms !== null ? html`<${Stat} k="time to first token" v=${fmtMs(llm.ttft_ms)} />` : null}
      <${Stat} k="cost" v=${fmtCost(llm.cost_usd)} />
    </div>
    <dl class="kv">
      ${llm.operation ? html`<dt>operation</dt><dd>${llm.operation}</dd>` : null}
      ${llm.provider ? html`<dt>provider</dt><dd>${llm.provider}</dd>` : null}
      ${llm.response_model && llm.response_model !== llm.request_model ? html`<dt>response model</dt><dd>${llm.response_model}</dd>` : null}
      ${llm.finish_reasons.length ? html`<dt>finish</dt><dd>${llm.finish_reasons.join(', ')}</dd>` : null}
      ${llm.rejection_reason ? html`<dt>rejected</dt><dd><span class="pill err">${llm.rejection_reason}</span></dd>` : null}
      ${llm.kv_cache_hit_ratio !== null ? html`<dt>KV-cache hits</dt><dd>${(llm.kv_cache_hit_ratio * 100).toFixed(1)}%</dd>` : null}
      ${llm.prompt_cache_hit_ratio != null ? html`<dt>prompt-cache hits</dt><dd>${(llm.prompt_cache_hit_ratio * 100).toFixed(1)}%</dd>` : null}
      ${llm.ab_group ? html`<dt>A/B group</dt><dd>${llm.ab_group}</dd>` : null}
      ${llm.gray_tag ? html`<dt>gray tag</dt><dd>${llm.gray_tag}</dd>` : null}
      ${llm.session_id ? html`<dt>session</dt><dd><a href=${sessionUrl(llm.session_id)}>${llm.session_id}</a></dd>` : null}
      ${llm.user_id ? html`<dt>user</dt><dd>${llm.user_id}</dd>` : null}
      ${llm.tool_name ? html`<dt>tool</dt><dd>${llm.tool_name}${llm.tool_call_id ? ` (${llm.tool_call_id})` : ''}</dd>` : null}
    </dl>
    <h3>Conversation</h3>
    <${Conversation} conv=${conv} />
  </section>`;
}

function SpanPanel({ traceId, spanId, ix, i }) {
  const span = useApi(`/api/v1/traces/${enc(traceId)}/spans/${enc(spanId)}`);
  const s = ix.s;
  useEffect(() => { if (span.data) performance.mark('threadline:span-shown'); }, [span.data]);
  if (span.error) return html`<${ErrorBox} error=${span.error} />`;
  if (!span.data) return html`<h2>${ix.names[s.name[i]]}</h2><${Loading} what="span" />`;
  const d = span.data;
  const parent = s.parent[i];
  return html`
    <h2 class="span-title">${d.name}</h2>
    <div class="row" style="margin-bottom:6px">
      <span class="pill">${d.service}</span><span class="pill">${d.kind}</span>
      <span class=${`pill ${d.status.code === 'error' ? 'err' : ''}`}>${d.status.code}${d.status.message ? `: ${d.status.message}` : ''}</span>
    </div>
    <dl class="kv">
      <dt>span id</dt><dd>${d.span_id}</dd>
      <dt>parent</dt><dd>${parent >= 0 ? html`<a href=${`/traces/${traceId}?span=${s.span_id[parent]}`}>${ix.names[s.name[parent]]}</a>` : '(root)'}</dd>
      <dt>start</dt><dd>${fmtTime(d.start_time_unix_nano)} (+${fmtUs(s.start_us[i])})</dd>
      <dt>duration</dt><dd>${fmtMs(d.duration_ms)} · self ${fmtUs(s.self_us[i])}${s.critical[i] ? ' · on the critical path' : ''}</dd>
    </dl>
    ${d.llm ? html`<${LlmPanel} llm=${d.llm} conv=${d.conversation} />` : null}
    ${!d.llm && d.conversation ? html`<h3>Conversation</h3><${Conversation} conv=${d.conversation} />` : null}
    <h3>Logs (${d.logs.length})</h3>
    <${Logs} logs=${d.logs} />
    <h3>Attributes</h3><${Kv} obj=${d.attributes} />
    <h3>Events (${d.events.length})</h3>
    ${d.events.length ? d.events.map((e) => html`<div class="panel" style="margin-bottom:4px"><b>${e.name}</b>
      <span class="muted mono"> ${fmtTime(e.time_unix_nano)}</span><${Kv} obj=${e.attributes} /></div>`) : html`<p class="muted">none</p>`}
    <h3>Links (${d.links.length})</h3>
    ${d.links.length ? d.links.map((l) => html`<div><a class="mono" href=${`/traces/${l.trace_id}?span=${l.span_id}`}>${l.trace_id.slice(0, 16)}… / ${l.span_id}</a><${Kv} obj=${l.attributes} /></div>`)
      : html`<p class="muted">none</p>`}
    <h3>Resource</h3><${Kv} obj=${d.resource.attributes} />
    <h3>Scope</h3><p class="mono">${d.scope.name || '(unnamed)'} ${d.scope.version}</p>`;
}
