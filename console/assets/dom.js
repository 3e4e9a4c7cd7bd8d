// dom.js builds elements. Every value is set as text or as an attribute,
// never parsed as HTML: records and answers may hold anything.

// h returns a new element. props: "class", "on<event>" listeners, any
// attribute (false, null and undefined leave it out; true sets it empty).
// children: nodes, or values shown as text; arrays are flattened.
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  append(el, children);
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

// s is h for SVG elements.
export function s(tag, props = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  setProps(el, props);
  append(el, children);
  return el;
}

function setProps(el, props) {
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.setAttribute('class', v);
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace empties el and fills it with children. When the focus was on
// an element inside el with a data-focus key, it moves to the new element
// with the same key: a refresh does not throw a keyboard user out.
export function replace(el, ...children) {
  const active = document.activeElement;
  const key = active && active !== el && el.contains(active) ? active.dataset.focus : undefined;
  el.replaceChildren();
  append(el, children);
  if (key !== undefined) {
    const again = el.querySelector('[data-focus="' + CSS.escape(key) + '"]');
    if (again) again.focus({ preventScroll: true });
  }
  return el;
}

// table returns a table with a caption, a header row of column headings
// and an empty tbody, which it also returns.
export function table(caption, headings, props = {}) {
  const body = h('tbody');
  const t = h('table', props,
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headings.map((x) => h('th', { scope: 'col' }, x)))),
    body);
  return { el: h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': caption }, t), body };
}

// ago says how long ago an RFC 3339 time was, e.g. "12 s ago".
export function ago(when, now = Date.now()) {
  if (!when) return '—';
  return duration(now - Date.parse(when)) + ' ago';
}

// duration says a length of time in milliseconds, e.g. "2.1 s".
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  ms = Math.max(0, ms);
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60_000) return (ms / 1000).toFixed(1) + ' s';
  if (ms < 3_600_000) return Math.round(ms / 60_000) + ' min';
  return (ms / 3_600_000).toFixed(1) + ' h';
}

// time shows an RFC 3339 time in the browser's locale.
export function time(when) {
  return when ? new Date(when).toLocaleString() : '—';
}

// num shows an integer with digit grouping.
export function num(n) {
  return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
}
