// Shared helpers of the UI: the API client (with the tenant's API key), navigation,
// formatting and small components. Everything talks to the JSON API under /api/v1.
import { html, useState, useEffect } from '/ui/vendor/htm-preact.mjs';
export { html, render, useState, useEffect, useRef, useMemo, useCallback, useLayoutEffect } from '/ui/vendor/htm-preact.mjs';

const KEY_STORAGE = 'threadline.apiKey';
export const auth = {
  key: localStorage.getItem(KEY_STORAGE) || '',
  listeners: new Set(),
  needed: false,
  set(key) {
    this.key = key;
    if (key) localStorage.setItem(KEY_STORAGE, key); else localStorage.removeItem(KEY_STORAGE);
    this.needed = false;
    this.listeners.forEach((f) => f());
  },
  ask() { this.needed = true; this.listeners.forEach((f) => f()); },
};

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// Whether this server wants a key at all, asked once (the health endpoint needs none),
// so the key is asked for before the first request instead of after a 401.
let keyCheck = null;
function keyReady() {
  if (!keyCheck) {
    keyCheck = fetch('/api/v1/health').then((r) => r.json()).then(
      (h) => (h.auth_required && !auth.key ? waitForKey() : undefined),
      () => undefined,
    );
  }
  return keyCheck;
}

/** GET a JSON API path; a 401 asks for the API key once and retries with it. */
export async function api(path) {
  await keyReady();
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = { Accept: 'application/json' };
    if (auth.key) headers.Authorization = `Bearer ${auth.key}`;
    const res = await fetch(path, { headers });
    if (res.status === 401) {
      if (attempt === 0) { await waitForKey(); continue; }
    }
    const text = await res.text();
    let body;
    try { body = text ? JSON.parse(text) : null; } catch { body = null; }
    if (!res.ok) throw new ApiError(res.status, (body && body.error) || `${res.status} ${res.statusText}`);
    return body;
  }
  throw new ApiError(401, 'an API key is needed');
}

function waitForKey() {
  return new Promise((resolve) => {
    const done = () => { if (!auth.needed) { auth.listeners.delete(done); resolve(); } };
    auth.listeners.add(done);
    auth.ask();
  });
}

/** Loads `path` (re-run when it changes); { data, error, loading }. */
// `path` in the state is the request `data` answers: while a new one loads, the last
// answer stays on screen, and `state.path !== path` says it is stale.
export function useApi(path) {
  const [state, setState] = useState({ data: null, error: null, loading: true, path: null });
  useEffect(() => {
    if (!path) { setState({ data: null, error: null, loading: false, path }); return; }
    let live = true;
    setState((s) => ({ data: s.data, error: null, loading: true, path: s.path }));
    api(path).then(
      (data) => live && setState({ data, error: null, loading: false, path }),
      (error) => live && setState({ data: null, error, loading: false, path }),
    );
    return () => { live = false; };
  }, [path]);
  return state;
}

// Navigation: same-origin links are handled in the page (history API).
const navListeners = new Set();
export function onNavigate(f) { navListeners.add(f); return () => navListeners.delete(f); }
export function navigate(url, replace = false) {
  if (replace) history.replaceState(null, '', url); else history.pushState(null, '', url);
  navListeners.forEach((f) => f());
  if (!replace) window.scrollTo(0, 0);
}

export const enc = encodeURIComponent;
export const traceUrl = (id, span) => `/traces/${id}${span ? `?span=${span}` : ''}`;
export const lineageUrl = (node) => `/lineage/${enc(node)}`;
export const impactUrl = (node) => `/impact/${enc(node)}`;
export const sessionUrl = (id) => `/sessions/${enc(id)}`;
export const incidentUrl = (id) => `/incidents/${enc(id)}`;

/** Query string of an object, leaving out empty values. */
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '' || v === false) continue;
    if (Array.isArray(v)) v.forEach((x) => p.append(k, x)); else p.append(k, v === true ? '1' : v);
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : ms.toFixed(0)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
}
export const fmtUs = (us) => fmtMs(us / 1000);
export function fmtNum(n, digits = 0) {
  if (n === null || n === undefined) return '–';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}
export function fmtCost(usd) {
  if (usd === null || usd === undefined) return '–';
  if (usd === 0) return '$0';
  if (usd < 0.0001) return '<$0.0001';
  return `$${usd < 1 ? usd.toFixed(4) : usd.toFixed(2)}`;
}
export function fmtTime(nanosOrSeconds) {
  if (nanosOrSeconds === null || nanosOrSeconds === undefined) return '–';
  const n = Number(nanosOrSeconds);
  const ms = n > 1e14 ? n / 1e6 : n * 1000;
  const d = new Date(ms);
  return `${d.toISOString().replace('T', ' ').slice(0, 19)}Z`;
}
export function fmtPct(r) { return r === null || r === undefined ? '–' : `${(r * 100).toFixed(1)}%`; }

/** The kind part of a node id (`adapter:fin-lora@7` → `adapter`). */
export const nodeKind = (id) => id.slice(0, id.indexOf(':'));
export const nodeName = (id) => id.slice(id.indexOf(':') + 1);

export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<div class="error-box" role="alert">${error.message || String(error)}</div>`;
}

export function Loading({ what }) {
  return html`<p class="loading" aria-live="polite">Loading ${what || ''}…</p>`;
}

export function Stat({ k, v }) {
  return html`<div class="stat"><span class="v">${v}</span><span class="k">${k}</span></div>`;
}

/** A chip linking to a lineage node. */
export function NodeChip({ kind, label, node }) {
  return html`<a class="chip" href=${lineageUrl(node)} data-node=${node}><b>${kind}</b>${label}</a>`;
}

/** The style of a laid-out SVG of natural `width`: as wide as its frame allows, up to
 *  `grow` times that width, never narrower (the frame scrolls then). */
export function svgFit(width, grow) {
  return `width:min(100%, ${Math.round(width * grow)}px);min-width:${width}px;height:auto;display:block`;
}

export function setTitle(t) { document.title = t ? `${t} · Threadline` : 'Threadline'; }
