// chart.js draws a rate over time as a small SVG line chart.

import { h, s, replace } from './dom.js';

const W = 600;
const H = 120;
const PAD = 4;

// rateChart returns a figure holding an <svg>, and a draw function
// taking [time, value] points, oldest first.
export function rateChart(label) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label, preserveAspectRatio: 'none' });
  const title = s('title', {}, label);
  const caption = h('figcaption', { class: 'muted' }, label);
  const el = h('figure', { class: 'chart-box' }, caption, svg);
  function draw(points) {
    const max = Math.max(1, ...points.map((p) => p[1]));
    caption.textContent = label + ' over the last ' + points.length * 2 + ' s; top of the chart ' + max.toFixed(1) + ' /s';
    const children = [title,
      s('line', { x1: 0, y1: H - PAD, x2: W, y2: H - PAD, class: 'axis' })];
    if (points.length >= 2) {
      const t0 = points[0][0];
      const span = Math.max(1, points[points.length - 1][0] - t0);
      const xy = points.map(([t, v]) => [
        ((t - t0) / span) * W,
        H - PAD - (v / max) * (H - 2 * PAD),
      ]);
      children.push(s('polyline', { points: xy.map(([x, y]) => x.toFixed(1) + ',' + y.toFixed(1)).join(' '), class: 'line' }));
      const last = points[points.length - 1][1];
      title.textContent = label + ': now ' + last.toFixed(1) + ' per second, at most ' + max.toFixed(1);
    }
    replace(svg, children);
  }
  draw([]);
  return { el, draw };
}
