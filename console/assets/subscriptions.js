// subscriptions.js is the list of subscriptions: state, delivery rate,
// lag, failing partitions, filtered as one types.

import * as api from './api.js';
import { h, replace, table, num } from './dom.js';

const PAGE = 100;

export function subscriptionsPage(ctx) {
  const rates = new Map(); // subscription id -> api.Rate
  let subs = [];
  let statuses = new Map();
  let more = false;

  const filter = h('input', { id: 'filter', type: 'search', autocomplete: 'off', 'aria-controls': 'subs' });
  filter.addEventListener('input', render);
  const { el: tableEl, body } = table('Subscriptions, refreshed every 2 s',
    ['Name', 'State', 'Topics', 'Acked', 'Rate /s', 'Lag', 'Pending', 'Failing'], { id: 'subs' });
  const footer = h('p', { class: 'muted' });
  const el = h('section', {},
    h('h1', {}, 'Subscriptions'),
    h('div', { class: 'filters' }, h('label', { for: 'filter' }, 'Filter by name, id or topic'), filter),
    tableEl,
    footer);

  function render() {
    const q = filter.value.trim().toLowerCase();
    const shown = subs.filter((s) => !q || s.name.toLowerCase().includes(q) || s.id.toLowerCase().includes(q) ||
      s.topics.some((t) => t.toLowerCase().includes(q)));
    replace(body, shown.map((s) => {
      const st = statuses.get(s.id);
      const t = st ? api.totals(st) : null;
      const rate = rates.get(s.id)?.perSecond();
      return h('tr', { 'data-sub-id': s.id },
        h('th', { scope: 'row' }, h('a', { href: '#/subscriptions/' + encodeURIComponent(s.id), 'data-focus': s.id }, s.name), h('div', { class: 'muted mono' }, s.id)),
        h('td', {}, h('span', { class: 'badge ' + (s.paused ? 'paused' : 'active') }, s.paused ? 'paused' : 'active')),
        h('td', {}, s.topics.join(', ')),
        h('td', { class: 'n acked' }, st ? num(api.progress(st)) : '…'),
        h('td', { class: 'n' }, rate === null || rate === undefined ? '…' : rate.toFixed(1)),
        h('td', { class: 'n' }, t ? num(t.lag) : '…'),
        h('td', { class: 'n' }, t ? num(t.pending) : '…'),
        h('td', { class: 'n' + (t && t.failing ? ' bad' : '') }, t ? num(t.failing) : '…'));
    }));
    if (shown.length === 0) {
      body.append(h('tr', {}, h('td', { colspan: 8 }, subs.length ? 'No subscription matches the filter.' : 'No subscriptions yet.')));
    }
    footer.textContent = more ? 'Showing the first ' + PAGE + ' subscriptions.' : '';
  }

  async function refresh() {
    const page = await api.get('/v1/subscriptions?limit=' + PAGE, { signal: ctx.signal });
    subs = page.items || [];
    more = Boolean(page.next_cursor);
    const now = Date.now();
    const answers = await Promise.allSettled(subs.map((s) => api.get(api.sub(s.id, '/status'), { signal: ctx.signal })));
    const next = new Map();
    answers.forEach((a, i) => {
      if (a.status !== 'fulfilled') return;
      const id = subs[i].id;
      next.set(id, a.value);
      if (!rates.has(id)) rates.set(id, new api.Rate());
      rates.get(id).add(now, api.progress(a.value));
    });
    statuses = next;
    if (ctx.live()) render();
  }

  return { el, refresh };
}
