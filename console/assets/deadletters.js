// deadletters.js browses a subscription's dead letters, filtered by
// partition, key and answer, with each one's headers; a token that may
// write redrives the selected ones or all of them.

import * as api from './api.js';
import { h, replace, table, num, time } from './dom.js';
import { confirmDialog } from './subscription.js';

const PAGE = 200;

export function deadLettersPage(ctx) {
  const [id] = ctx.params;
  const canWrite = ctx.session.canWrite;
  const selected = new Set();
  const opened = new Set(); // the dead letters' headers and values shown
  let items = [];
  let cursor = '';
  let name = id;

  const heading = h('h1', {}, 'Dead letters');
  const fPart = h('input', { id: 'f-partition', type: 'number', min: 0, inputmode: 'numeric' });
  const fKey = h('input', { id: 'f-key', type: 'search', autocomplete: 'off' });
  const fAnswer = h('input', { id: 'f-answer', type: 'search', autocomplete: 'off' });
  for (const f of [fPart, fKey, fAnswer]) f.addEventListener('input', render);
  const filters = h('div', { class: 'filters' },
    h('span', {}, h('label', { for: 'f-partition' }, 'Partition'), fPart),
    h('span', {}, h('label', { for: 'f-key' }, 'Key contains'), fKey),
    h('span', {}, h('label', { for: 'f-answer' }, 'Status or error contains'), fAnswer));
  const cols = ['Source', 'Key', 'Last answer', 'Attempts', 'Last attempt', 'Headers', 'Value'];
  const list = table('Dead letters, oldest first', canWrite ? ['Select', ...cols] : cols, { id: 'dead-letters' });
  const more = h('button', { type: 'button', id: 'more', hidden: true, onclick: loadMore }, 'Load more');
  const redriveSel = h('button', { type: 'button', id: 'redrive-selected', disabled: true, onclick: () => redrive(false) }, 'Redrive selected');
  const redriveAll = h('button', { type: 'button', id: 'redrive-all', onclick: () => redrive(true) }, 'Redrive all');
  const result = h('p', { id: 'redrive-result', role: 'status', 'aria-live': 'polite' });
  const el = h('section', {},
    h('p', { class: 'crumbs' }, h('a', { href: '#/subscriptions' }, 'Subscriptions'), ' / ',
      h('a', { href: '#/subscriptions/' + encodeURIComponent(id), id: 'sub-link' }, id), ' / '),
    heading,
    canWrite ? h('div', { class: 'buttons actions' }, redriveSel, redriveAll) : null,
    result,
    filters,
    list.el,
    more,
    h('p', { class: 'muted' }, 'Each dead letter shows its source record, key, last answer, headers and the first 8 KiB of its value.'));

  // details keeps a dead letter's headers open across refreshes.
  function details(id, ...children) {
    const el = h('details', { open: opened.has(id) }, ...children);
    el.addEventListener('toggle', () => {
      if (el.open) opened.add(id);
      else opened.delete(id);
    });
    return el;
  }

  // value shows a dead letter's value excerpt, as text or base64, behind
  // a summary saying its size.
  function value(d) {
    if (d.value_dropped) return 'dropped (' + num(d.value_size) + ' bytes)';
    if (!d.value && !d.value_base64) return d.value_size ? num(d.value_size) + ' bytes' : 'empty';
    const size = num(d.value_size) + (d.value_size === 1 ? ' byte' : ' bytes') + (d.value_base64 ? ', base64' : '') + (d.value_truncated ? ', first 8 KiB' : '');
    return details('value ' + d.id,
      h('summary', { 'data-focus': 'value ' + d.id }, size),
      h('pre', { class: 'body' }, d.value || d.value_base64));
  }

  function matches(d) {
    if (fPart.value !== '' && String(d.partition) !== fPart.value) return false;
    const key = d.key || d.key_base64 || '';
    if (fKey.value && !key.includes(fKey.value)) return false;
    const answer = (d.status ? String(d.status) : '') + ' ' + (d.error || '');
    if (fAnswer.value && !answer.toLowerCase().includes(fAnswer.value.toLowerCase())) return false;
    return true;
  }

  let rendered = false;
  function render() {
    rendered = true;
    const shown = items.filter(matches);
    replace(list.body, shown.map((d) => {
      const headers = Object.entries(d.headers || {});
      const cells = [
        h('th', { scope: 'row' }, d.topic + '/' + d.partition + ' @ ' + num(d.offset), h('div', { class: 'muted mono' }, d.id)),
        h('td', { class: 'mono key' }, d.key ? d.key : (d.key_base64 ? 'base64 ' + d.key_base64 : '(no key)')),
        h('td', { class: 'bad' }, d.error ? d.error + (d.status ? ' (HTTP ' + d.status + ')' : '') : 'HTTP ' + d.status),
        h('td', { class: 'n' }, num(d.attempts)),
        h('td', {}, time(d.last_attempt)),
        h('td', {}, headers.length === 0 ? '—' : details(d.id,
          h('summary', { 'data-focus': 'headers ' + d.id }, headers.length + (headers.length === 1 ? ' header' : ' headers')),
          h('dl', { class: 'headers' }, headers.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])))),
        h('td', {}, value(d)),
      ];
      if (canWrite) {
        const box = h('input', { type: 'checkbox', id: 'sel-' + d.id, 'data-focus': 'select ' + d.id, 'aria-label': 'Select ' + d.id, checked: selected.has(d.id) });
        box.addEventListener('change', () => {
          if (box.checked) selected.add(d.id);
          else selected.delete(d.id);
          redriveSel.disabled = selected.size === 0;
        });
        cells.unshift(h('td', {}, box));
      }
      return h('tr', { 'data-id': d.id }, cells);
    }));
    if (shown.length === 0) {
      list.body.append(h('tr', {}, h('td', { colspan: cols.length + (canWrite ? 1 : 0) }, items.length ? 'No dead letter matches the filters.' : 'No dead letters.')));
    }
    more.hidden = !cursor;
    redriveSel.disabled = selected.size === 0;
  }

  async function redrive(all) {
    const ids = [...selected];
    const ok = await confirmDialog(all ? 'Redrive every dead letter?' : 'Redrive ' + ids.length + ' dead letters?',
      [h('p', {}, 'The owners of their partitions deliver them again, with the same delivery ids.')], 'Redrive');
    if (!ok) return;
    try {
      const r = await api.post(api.sub(id, '/dead-letters/redrive'), all ? { all: true } : { ids }, { signal: ctx.signal });
      result.textContent = r.redriven + (r.redriven === 1 ? ' dead letter' : ' dead letters') + ' queued for delivery.';
      selected.clear();
      render();
    } catch (err) {
      ctx.say(err.message, true);
    }
  }

  async function loadMore() {
    const page = await api.get(api.sub(id, '/dead-letters?limit=' + PAGE + '&cursor=' + encodeURIComponent(cursor)), { signal: ctx.signal });
    const known = new Set(items.map((d) => d.id));
    items = items.concat((page.items || []).filter((d) => !known.has(d.id)));
    cursor = page.next_cursor || '';
    render();
  }

  async function refresh() {
    const [s, page] = await Promise.all([
      api.get(api.sub(id), { signal: ctx.signal }),
      api.get(api.sub(id, '/dead-letters?limit=' + PAGE), { signal: ctx.signal }),
    ]);
    name = s.name;
    heading.textContent = 'Dead letters of ' + name;
    el.querySelector('#sub-link').textContent = name;
    // The first page is read again; pages loaded further stay.
    const first = page.items || [];
    const known = new Set(first.map((d) => d.id));
    if (items.length <= first.length) cursor = page.next_cursor || '';
    const before = items.map((d) => d.id).join(' ');
    items = first.concat(items.filter((d) => !known.has(d.id)));
    // Dead letters do not change once written: render only what is new.
    if (ctx.live() && (items.map((d) => d.id).join(' ') !== before || !rendered)) render();
  }

  return { el, refresh };
}
