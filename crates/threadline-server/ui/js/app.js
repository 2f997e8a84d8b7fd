// The single-page app: a shell (navigation, API-key prompt) and a router from the
// page's URL to its view. Every page is a deep link: it renders from its URL alone.
import { html, render, useState, useEffect, useRef, auth, navigate, onNavigate } from './lib.js';
import { SearchPage } from './pages/search.js';
import { TracePage } from './pages/trace.js';
import { SessionPage, SessionsPage } from './pages/session.js';
import { LineagePage } from './pages/lineage.js';
import { LineageBrowserPage } from './pages/nodes.js';
import { ServiceMapPage } from './pages/servicemap.js';
import { DashboardPage } from './pages/dashboard.js';
import { IncidentsPage, IncidentPage } from './pages/incidents.js';
import { ImpactPage } from './pages/impact.js';

const ROUTES = [
  [/^\/(traces\/?)?$/, () => html`<${SearchPage} />`, 'traces'],
  [/^\/traces\/([^/]+)$/, (m) => html`<${TracePage} id=${m[1]} />`, 'traces'],
  [/^\/sessions\/?$/, () => html`<${SessionsPage} />`, 'sessions'],
  [/^\/sessions\/(.+)$/, (m) => html`<${SessionPage} id=${decodeURIComponent(m[1])} />`, 'sessions'],
  [/^\/service-map\/?$/, () => html`<${ServiceMapPage} />`, 'service-map'],
  [/^\/lineage\/?$/, () => html`<${LineageBrowserPage} />`, 'lineage'],
  [/^\/lineage\/(.+)$/, (m) => html`<${LineagePage} node=${decodeURIComponent(m[1])} />`, 'lineage'],
  [/^\/dashboard\/?$/, () => html`<${DashboardPage} />`, 'dashboard'],
  [/^\/incidents\/?$/, () => html`<${IncidentsPage} />`, 'incidents'],
  [/^\/incidents\/(.+)$/, (m) => html`<${IncidentPage} id=${decodeURIComponent(m[1])} />`, 'incidents'],
  [/^\/impact\/(.+)$/, (m) => html`<${ImpactPage} node=${decodeURIComponent(m[1])} />`, 'lineage'],
];

function route(path) {
  for (const [re, view, section] of ROUTES) {
    const m = path.match(re);
    if (m) return { view: view(m), section };
  }
  return { view: html`<h1>Page not found</h1><p>No page at <code>${path}</code>. <a href="/">Search traces</a>.</p>`, section: '' };
}

function KeyDialog() {
  const ref = useRef();
  const [key, setKey] = useState('');
  const [, tick] = useState(0);
  useEffect(() => {
    const f = () => tick((n) => n + 1);
    auth.listeners.add(f);
    return () => auth.listeners.delete(f);
  }, []);
  useEffect(() => {
    const d = ref.current;
    if (auth.needed && d && !d.open) d.showModal();
    if (!auth.needed && d && d.open) d.close();
  });
  const submit = (e) => { e.preventDefault(); if (key.trim()) auth.set(key.trim()); };
  return html`<dialog ref=${ref} aria-labelledby="key-title" onCancel=${(e) => e.preventDefault()}>
    <form onSubmit=${submit}>
      <h2 id="key-title">API key</h2>
      <p class="muted">This Threadline has tenants. Enter your API key; it is kept in this
        browser and sent as <code>Authorization: Bearer</code>.</p>
      <label>API key <input type="password" name="api-key" autocomplete="off" value=${key}
        onInput=${(e) => setKey(e.target.value)} autofocus /></label>
      <p><button class="primary" type="submit">Use this key</button></p>
    </form>
  </dialog>`;
}

function Shell() {
  // The whole URL: a new query string re-renders the page (which reads it), a new
  // path mounts another page.
  const [, setHref] = useState(location.href);
  const path = location.pathname;
  useEffect(() => onNavigate(() => setHref(location.href)), []);
  useEffect(() => {
    const pop = () => setHref(location.href);
    window.addEventListener('popstate', pop);
    return () => window.removeEventListener('popstate', pop);
  }, []);
  const { view, section } = route(location.pathname);
  const nav = [['/traces', 'Traces', 'traces'], ['/sessions', 'Sessions', 'sessions'],
    ['/service-map', 'Service map', 'service-map'], ['/lineage', 'Lineage', 'lineage'],
    ['/dashboard', 'Dashboard', 'dashboard'], ['/incidents', 'Incidents', 'incidents']];
  return html`
    <header class="top">
      <a class="brand" href="/">Threadline</a>
      <nav aria-label="Sections">
        ${nav.map(([href, label, s]) =>
          html`<a href=${href} class=${s === section ? 'active' : ''} aria-current=${s === section ? 'page' : null}>${label}</a>`)}
      </nav>
      <span class="spacer"></span>
      ${auth.key ? html`<button type="button" onClick=${() => { auth.set(''); location.reload(); }}>Forget API key</button>` : null}
    </header>
    <main id="main" key=${path}>${view}</main>
    <${KeyDialog} />`;
}

// Same-origin links to pages are followed in place.
document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest && e.target.closest('a[href]');
  if (!a || a.target || a.origin !== location.origin || a.hasAttribute('download')) return;
  if (/^\/(api|ui|jaeger|metrics)(\/|$)/.test(a.pathname)) return;
  e.preventDefault();
  navigate(a.pathname + a.search + a.hash);
});

const root = document.getElementById('app');
root.textContent = '';
render(html`<${Shell} />`, root);
