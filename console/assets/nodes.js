// nodes.js lists the live nodes: their roles, heartbeats, and the
// partitions (and key ranges) each owns, with whether its lease on each
// is claimed.

import * as api from './api.js';
import { h, replace, table, ago, time } from './dom.js';

export function nodesPage(ctx) {
  const list = table('Live nodes, refreshed every 2 s', ['Node', 'Roles', 'Version', 'Started', 'Heartbeat', 'Owns'], { id: 'nodes' });
  const el = h('section', {},
    h('h1', {}, 'Nodes'),
    list.el,
    h('p', { class: 'muted' }, 'A node is listed while it sends heartbeats. "lease not claimed" is a partition the consumer group gave the node whose claim in the tracking state is refused or failing.'));

  async function refresh() {
    const page = await api.get('/v1/nodes', { signal: ctx.signal });
    const now = Date.now();
    if (!ctx.live()) return;
    replace(list.body, (page.items || []).map((n) => h('tr', {},
      h('th', { scope: 'row', class: 'mono' }, n.id),
      h('td', {}, n.roles.join(', ')),
      h('td', {}, n.version),
      h('td', {}, time(n.started_at)),
      h('td', {}, ago(n.heartbeat_at, now)),
      h('td', {}, n.owned.length === 0 ? 'nothing' : h('ul', { class: 'owned' }, n.owned.map((o) => h('li', {},
        h('a', { href: '#/subscriptions/' + encodeURIComponent(o.subscription), 'data-focus': n.id + ' ' + o.subscription + ' ' + o.topic + '/' + o.partition }, o.subscription),
        ' ' + o.topic + '/' + o.partition,
        o.ranges ? ' keys ' + o.ranges : '',
        o.claimed ? '' : h('span', { class: 'bad' }, ' lease not claimed'))))))));
    if ((page.items || []).length === 0) list.body.append(h('tr', {}, h('td', { colspan: 6 }, 'No live node.')));
  }

  return { el, refresh };
}
