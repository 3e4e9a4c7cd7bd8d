// chart.js draws a rate over time as a small SVG line chart.

import { s, replace } from './dom.js';

const W = 600;
const H = 120;
const PAD = 4;

// rateChart returns an <svg> and a draw function taking [time, value]
// points, oldest first.
export function rateChart(label) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label, preserveAspectRatio: 'none' });
  const title = s('title', {}, label);
  function draw(points) {
    const max = Math.max(1, ...points.map((p) => p[1]));
    const children = [title,
      s('line', { x1: 0, y1: H - PAD, x2: W, y2: H - PAD, class: 'axis' }),
      s('text', { x: PAD, y: 14, class: 'chart-label' }, max.toFixed(1) + ' /s')];
    if (points.length >= 2) {
      const t0 = points[0][0];
      const span = Math.max(1, points[points.length - 1][0] - t0);
      const xy = points.map(([t, v]) => [
        ((t - t0) / span) * W,
        H - PAD - (v / max) * (H - 2 * PAD - 16),
      ]);
      children.push(s('polyline', { points: xy.map(([x, y]) => x.toFixed(1) + ',' + y.toFixed(1)).join(' '), class: 'line' }));
      const last = points[points.length - 1][1];
      title.textContent = label + ': now ' + last.toFixed(1) + ' per second, at most ' + max.toFixed(1);
    }
    replace(svg, children);
  }
  draw([]);
  return { el: svg, draw };
}
