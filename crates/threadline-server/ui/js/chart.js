// A uPlot time-series chart with shaded bands (incidents) and a marked instant (onset).
import { html, useEffect, useRef } from './lib.js';
import { serviceColor } from './waterfall.js';

/**
 * series: [{label, points: [{t, value}]}] sharing one time axis (unix seconds);
 * bands: [[from, to]] shaded; marker: unix seconds drawn as a line.
 */
export function Chart({ title, unit, series, bands = [], marker, height = 180 }) {
  const box = useRef();
  useEffect(() => {
    const el = box.current;
    if (!el || !window.uPlot) return undefined;
    const ts = [...new Set(series.flatMap((s) => s.points.map((p) => p.t)))].sort((a, b) => a - b);
    const data = [ts, ...series.map((s) => {
      const m = new Map(s.points.map((p) => [p.t, p.value]));
      return ts.map((t) => (m.has(t) ? m.get(t) : null));
    })];
    const css = getComputedStyle(document.documentElement);
    const fg = css.getPropertyValue('--fg2').trim() || '#888';
    const grid = css.getPropertyValue('--line').trim() || '#ddd';
    const shade = css.getPropertyValue('--err').trim() || '#e5534b';
    const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
    const opts = {
      width: Math.max(280, el.clientWidth - 4), height,
      // One series: the title names it; several: the legend, with values on hover.
      legend: { show: series.length > 1 },
      // Shares start at 0 and never pass 100%; other values from 0 (or their minimum
      // below it); a flat zero series stays near 0 instead of uPlot's 0–100.
      scales: unit === 'ratio'
        ? { x: { time: true }, y: { range: (u, min, max) => [0, Math.min(1, Math.max(max, 0.01) * 1.15)] } }
        : { x: { time: true }, y: { range: (u, min, max) => [Math.min(0, min ?? 0),
          (max ?? 0) > 0 ? max * 1.1 : (unit === 'USD' ? 0.01 : 1)] } },
      // UTC, as every time in the UI.
      tzDate: (t) => window.uPlot.tzDate(new Date(t * 1e3), 'Etc/UTC'),
      axes: [{ ...axis }, { ...axis, size: 74, values: (u, vals) => vals.map((v) => (v === null ? '' : fmtAxis(v, unit))) }],
      series: [{}, ...series.map((s, k) => ({ label: s.label, stroke: serviceColor(k + 1), width: 1.5, spanGaps: false,
        value: (u, v) => (v === null ? '–' : fmtAxis(v, unit)) }))],
      hooks: { drawClear: [(u) => {
        const c = u.ctx;
        c.save();
        c.fillStyle = shade; c.globalAlpha = 0.14;
        for (const [a, b] of bands) {
          const x0 = u.valToPos(a, 'x', true), x1 = u.valToPos(b, 'x', true);
          c.fillRect(x0, u.bbox.top, Math.max(2, x1 - x0), u.bbox.height);
        }
        if (marker) {
          c.globalAlpha = 0.9; c.fillStyle = shade;
          c.fillRect(u.valToPos(marker, 'x', true) - 1, u.bbox.top, 2, u.bbox.height);
        }
        c.restore();
      }] },
    };
    const plot = new window.uPlot(opts, data, el);
    const resize = () => plot.setSize({ width: Math.max(280, el.clientWidth - 4), height });
    window.addEventListener('resize', resize);
    return () => { window.removeEventListener('resize', resize); plot.destroy(); };
  }, [JSON.stringify(series), JSON.stringify(bands), marker, unit]);
  return html`<figure class="chart" style="margin:0"><h3>${title}${unit ? html` <span class="muted">(${unit})</span>` : null}</h3>
    <div ref=${box} role="img" aria-label=${`${title} chart`}></div></figure>`;
}

function fmtAxis(v, unit) {
  if (unit === 'ratio') return `${Number((v * 100).toPrecision(3))}%`;
  if (unit === 'USD') return `$${Number(v.toPrecision(3))}`;
  // Three significant digits: ticks 0.008 / 0.012 or 1.25k / 1.5k stay apart.
  if (Math.abs(v) >= 1000) return `${Number((v / 1000).toPrecision(3))}k`;
  return Math.abs(v) < 10 ? `${Number(v.toPrecision(3))}` : v.toFixed(0);
}
