// subscription.js is one subscription: its partitions with commit,
// watermark, lag, owner and key ranges; the record holding each
// watermark and why; every key not flowing (retrying, slow in flight,
// parked); a live rate chart; and, for a token that may write,
// its actions (pause, resume, seek, rotate the secret, send a test).

import * as api from './api.js';
import { h, replace, table, num, ago, duration, time } from './dom.js';
import { rateChart } from './chart.js';

export function subscriptionPage(ctx) {
  const [id] = ctx.params;
  const rate = new api.Rate(90);
  let sub = null;
  let status = null;

  const heading = h('h1', {}, 'Subscription');
  const facts = h('dl', { class: 'facts' });
  const figures = h('dl', { class: 'figures', 'aria-live': 'off' });
  const chart = rateChart('Acknowledged offsets per second');
  const actions = h('section', { class: 'actions', 'aria-labelledby': 'actions-h', hidden: !ctx.session.canWrite });
  const result = h('div', { class: 'result', role: 'status', 'aria-live': 'polite' });
  const parts = table('Partitions', ['Partition', 'Committed', 'Watermark', 'Log end', 'Lag', 'Pending', 'In flight', 'Owner', 'Key ranges'], { id: 'partitions' });
  const holding = table('Records holding the watermark', ['Partition', 'Offset', 'Key', 'Waiting', 'Why', 'Attempts', 'Last answer', 'Next attempt', 'Behind', 'Parked'], { id: 'holding' });
  const stalled = table('Keys not flowing', ['Partition', 'Key', 'State', 'Offset', 'Waiting', 'Attempts', 'Last answer', 'Next attempt', 'Behind', 'Parked', 'Owner'], { id: 'keys' });
  const stalledNote = h('p', { class: 'muted', id: 'keys-note' });
  let keys = null;
  const el = h('section', {},
    h('p', { class: 'crumbs' }, h('a', { href: '#/subscriptions' }, 'Subscriptions'), ' / '),
    heading,
    facts,
    h('p', {}, h('a', { href: '#/subscriptions/' + encodeURIComponent(id) + '/dead-letters', id: 'dead-letters-link' }, 'Dead letters')),
    actions,
    result,
    h('h2', {}, 'Delivery'),
    figures,
    chart.el,
    holding.el,
    h('p', { class: 'muted' }, 'Each watermark waits for the record above; "parked" counts records of busy keys held by offset only, read again from Kafka when their key frees up.'),
    stalled.el,
    stalledNote,
    parts.el);

  if (ctx.session.canWrite) buildActions();

  function buildActions() {
    const pause = h('button', { type: 'button', id: 'pause', onclick: () => act(sub.paused ? '/resume' : '/pause', sub.paused ? 'Resumed.' : 'Paused.') }, 'Pause');
    const test = h('button', { type: 'button', id: 'send-test', onclick: sendTest }, 'Send a test delivery');
    const rotate = h('button', { type: 'button', id: 'rotate', onclick: rotateSecret }, 'Rotate the signing secret');
    const to = h('select', { id: 'seek-to' },
      h('option', { value: 'latest' }, 'the end (skip what is waiting)'),
      h('option', { value: 'earliest' }, 'the beginning (redeliver everything retained)'),
      h('option', { value: 'timestamp' }, 'a time'));
    const when = h('input', { id: 'seek-time', type: 'datetime-local', step: 1 });
    const whenLabel = h('label', { for: 'seek-time' }, 'Time');
    const timeRow = h('span', { class: 'inline', hidden: true }, whenLabel, when);
    to.addEventListener('change', () => { timeRow.hidden = to.value !== 'timestamp'; });
    const seek = h('form', { class: 'seek', onsubmit: (ev) => { ev.preventDefault(); confirmSeek(to.value, when.value); } },
      h('label', { for: 'seek-to' }, 'Move the consumer group to'), to, timeRow,
      h('button', { type: 'submit', id: 'seek' }, 'Seek…'));
    // A test may try a filter and a transform before they are saved:
    // what is typed here replaces the subscription's for that test only.
    const tryFilter = h('textarea', { id: 'test-filter', rows: 2, spellcheck: 'false' }, sub?.filter || '');
    const tryTransform = h('textarea', { id: 'test-transform', rows: 2, spellcheck: 'false' }, sub?.transform || '');
    const tryValue = h('textarea', { id: 'test-value', rows: 2, spellcheck: 'false', placeholder: '{"keyhook":"test"}' });
    const tryOut = h('details', { class: 'try' }, h('summary', {}, 'Test with a value, filter or transform'),
      h('label', { for: 'test-value' }, 'Value (JSON; empty: the default test value)'), tryValue,
      h('label', { for: 'test-filter' }, 'Filter (CEL; empty: none)'), tryFilter,
      h('label', { for: 'test-transform' }, 'Transform (CEL; empty: none)'), tryTransform);
    actions.tryOut = { filter: tryFilter, transform: tryTransform, value: tryValue };
    replace(actions, h('h2', { id: 'actions-h' }, 'Actions'), h('div', { class: 'buttons' }, pause, test, rotate), tryOut, seek);
    actions.pauseButton = pause;
  }

  async function act(path, done) {
    try {
      sub = await api.post(api.sub(id, path), undefined, { signal: ctx.signal });
      ctx.say(done);
      render();
    } catch (err) {
      ctx.say(err.message, true);
    }
  }

  async function sendTest() {
    replace(result, h('p', {}, 'Sending a test delivery…'));
    try {
      const t = actions.tryOut;
      const body = { filter: t.filter.value, transform: t.transform.value };
      if (t.value.value.trim() !== '') {
        try {
          body.value = JSON.parse(t.value.value);
        } catch (err) {
          replace(result, h('p', { class: 'error' }, 'The value is not JSON: ' + err.message));
          return;
        }
      }
      const r = await api.post(api.sub(id, '/test'), body, { signal: ctx.signal });
      if (r.filtered) {
        replace(result, h('h2', {}, 'Test delivery ', r.delivery_id),
          h('dl', { class: 'facts', id: 'test-result' },
            h('dt', {}, 'Outcome'), h('dd', { id: 'test-filtered' }, 'filtered out: the filter rejects this record, nothing was sent')));
        return;
      }
      replace(result, h('h2', {}, 'Test delivery ', r.delivery_id),
        h('dl', { class: 'facts', id: 'test-result' },
          h('dt', {}, 'Outcome'), h('dd', { class: r.success ? 'good' : 'bad' }, r.success ? 'accepted' : 'not accepted'),
          h('dt', {}, 'Status'), h('dd', {}, r.status || 'no response'),
          h('dt', {}, 'Took'), h('dd', {}, duration(r.duration_ms)),
          r.error ? [h('dt', {}, 'Error'), h('dd', {}, r.error)] : null,
          h('dt', {}, 'Response body'), h('dd', {}, h('pre', { class: 'body' }, r.response_body + (r.response_body_truncated ? '\n…' : ''))),
          h('dt', {}, 'Body sent'), h('dd', {}, h('pre', { class: 'body', id: 'test-body' }, r.body || ''))));
    } catch (err) {
      replace(result, h('p', { class: 'error' }, err.message));
    }
  }

  async function rotateSecret() {
    const ok = await confirmDialog('Rotate the signing secret?',
      [h('p', {}, 'A new secret signs every delivery from now on; the current ones keep verifying for 24 hours.'),
        h('p', {}, 'The new secret is shown once.')], 'Rotate');
    if (!ok) return;
    try {
      sub = await api.post(api.sub(id, '/signing/rotate'), undefined, { signal: ctx.signal });
      const fresh = (sub.signing?.secrets || []).find((x) => x.secret);
      replace(result, h('h2', {}, 'New signing secret'),
        h('p', {}, 'Give it to the endpoint now; it is not shown again.'),
        h('pre', { class: 'body', id: 'new-secret' }, fresh ? fresh.secret : '(not returned)'));
      render();
    } catch (err) {
      ctx.say(err.message, true);
    }
  }

  async function confirmSeek(to, when) {
    const body = { to };
    if (to === 'timestamp') {
      if (!when) {
        ctx.say('Choose a time to seek to.', true);
        return;
      }
      body.timestamp = new Date(when).toISOString();
    }
    const ps = status?.partitions || [];
    const rows = ps.map((p) => {
      let what;
      if (to === 'latest') what = 'skips ' + num(p.lag) + ' waiting records (to ' + num(p.log_end) + ')';
      else if (to === 'earliest') what = 'redelivers every retained record below ' + num(Math.max(p.committed, 0)) + ' and on to ' + num(p.log_end);
      else what = 'redelivers from the first record at or after ' + new Date(body.timestamp).toLocaleString();
      return h('li', {}, p.topic + '/' + p.partition + ': committed ' + num(p.committed) + ', ' + what);
    });
    const ok = await confirmDialog('Seek ' + (sub?.name || id) + '?',
      [h('p', {}, 'Every node stops this subscription\'s consumers, the commits are rewritten and deliveries resume from there.'),
        h('ul', { id: 'seek-preview' }, rows)], 'Seek');
    if (!ok) return;
    try {
      const r = await api.post(api.sub(id, '/seek'), body, { signal: ctx.signal });
      replace(result, h('h2', {}, 'Seek done'),
        h('ul', {}, (r.partitions || []).map((p) => h('li', {}, p.topic + '/' + p.partition + ': ' + num(p.previous) + ' → ' + num(p.offset)))));
    } catch (err) {
      ctx.say(err.message, true);
    }
  }

  function render() {
    if (!sub) return;
    heading.textContent = sub.name;
    document.title = sub.name + ' · keyhook console';
    replace(facts,
      h('dt', {}, 'State'), h('dd', {}, h('span', { class: 'badge ' + (sub.paused ? 'paused' : 'active'), id: 'state' }, sub.paused ? 'paused' : 'active')),
      h('dt', {}, 'Id'), h('dd', { class: 'mono' }, sub.id),
      h('dt', {}, 'Topics'), h('dd', {}, sub.topics.join(', ')),
      h('dt', {}, 'Endpoint'), h('dd', { class: 'mono' }, sub.endpoint?.url || ''),
      h('dt', {}, 'Ordering'), h('dd', {}, sub.ordering + ', at most ' + sub.max_in_flight + ' in flight'),
      h('dt', {}, 'Dead letters to'), h('dd', {}, sub.dead_letter_topic || '<topic>.keyhook.dlq'));
    if (actions.pauseButton) actions.pauseButton.textContent = sub.paused ? 'Resume' : 'Pause';
    if (!status) return;
    const t = api.totals(status);
    const r = rate.perSecond();
    replace(figures,
      h('div', {}, h('dt', {}, 'Acked'), h('dd', { id: 'acked' }, num(api.progress(status)))),
      h('div', {}, h('dt', {}, 'Rate'), h('dd', {}, r === null ? '…' : r.toFixed(1) + ' /s')),
      h('div', {}, h('dt', {}, 'Lag'), h('dd', {}, num(t.lag))),
      h('div', {}, h('dt', {}, 'Pending'), h('dd', {}, num(t.pending))),
      h('div', {}, h('dt', {}, 'In flight'), h('dd', {}, num(t.inFlight))),
      h('div', {}, h('dt', {}, 'Parked'), h('dd', {}, num(t.parked))));
    chart.draw(rate.series());
    const now = Date.now();
    replace(parts.body, status.partitions.map((p) => h('tr', {},
      h('th', { scope: 'row' }, p.topic + '/' + p.partition),
      h('td', { class: 'n' }, num(p.committed)),
      h('td', { class: 'n' }, num(p.watermark)),
      h('td', { class: 'n' }, num(p.log_end)),
      h('td', { class: 'n' }, num(p.lag)),
      h('td', { class: 'n' }, num(p.pending)),
      h('td', { class: 'n' }, num(p.in_flight)),
      h('td', { class: 'mono' }, p.owner || '—'),
      h('td', { class: 'mono' }, (p.ranges || []).map((x) => x.lo + '–' + x.hi + ' ' + (x.owner || 'unclaimed')).join('; ') || 'whole'))));
    const held = status.partitions.filter((p) => p.holding);
    replace(holding.body, held.map((p) => {
      const x = p.holding;
      let why;
      if (x.dispatched) why = 'in flight for ' + duration(now - Date.parse(x.dispatched));
      else if (x.next_attempt) why = 'retrying after a failure';
      else why = 'waiting for its key\'s earlier record or a delivery slot';
      const answer = x.last_error ? x.last_error : (x.last_status ? 'HTTP ' + x.last_status : '—');
      return h('tr', { 'data-key': x.key || '' },
        h('th', { scope: 'row' }, p.topic + '/' + p.partition),
        h('td', { class: 'n' }, num(x.offset)),
        h('td', { class: 'mono key' }, x.key === undefined ? '(no key)' : x.key),
        h('td', { class: 'n' }, duration(x.age_ms)),
        h('td', {}, why),
        h('td', { class: 'n' }, num(x.attempts)),
        h('td', { class: x.last_error || (x.last_status && x.last_status > 299) ? 'bad' : '' }, answer),
        h('td', {}, x.next_attempt ? time(x.next_attempt) : '—'),
        h('td', { class: 'n' }, num(x.behind)),
        h('td', { class: 'n' }, x.parked ? num(x.parked) + ' (oldest ' + ago(x.oldest_parked, now) + ')' : '0'));
    }));
    if (held.length === 0) holding.body.append(h('tr', {}, h('td', { colspan: 10 }, 'Nothing pending: every watermark is at the log end.')));
    renderKeys(now);
  }

  const stateText = { retrying: 'retrying after a failure', in_flight: 'waiting behind a record in flight', parked: 'parked, read again when the key has room' };

  function renderKeys(now) {
    if (!keys) return;
    replace(stalled.body, keys.keys.map((k) => {
      const key = k.key !== undefined ? k.key : (k.key_base64 !== undefined ? 'base64:' + k.key_base64 : '(no key)');
      const answer = k.last_error ? k.last_error : (k.last_status ? 'HTTP ' + k.last_status : '—');
      return h('tr', { 'data-key': k.key || '', 'data-state': k.state },
        h('th', { scope: 'row' }, k.topic + '/' + k.partition),
        h('td', { class: 'mono key' }, key + (k.key_truncated ? '…' : '')),
        h('td', {}, stateText[k.state] || k.state),
        h('td', { class: 'n' }, num(k.offset)),
        h('td', { class: 'n' }, duration(k.age_ms)),
        h('td', { class: 'n' }, num(k.attempts)),
        h('td', { class: k.last_error || (k.last_status && k.last_status > 299) ? 'bad' : '' }, answer),
        h('td', {}, k.next_attempt ? time(k.next_attempt) : '—'),
        h('td', { class: 'n' }, num(k.behind)),
        h('td', { class: 'n' }, num(k.parked)),
        h('td', { class: 'mono' }, k.owner || '—'));
    }));
    if (keys.keys.length === 0) stalled.body.append(h('tr', {}, h('td', { colspan: 11 }, 'Every key flows.')));
    stalledNote.textContent = (keys.truncated ? 'More keys are not flowing than shown. ' : '') +
      'As each partition\'s owner last wrote them, at most once a second.';
  }

  async function refresh() {
    const [s, st, ks] = await Promise.all([
      api.get(api.sub(id), { signal: ctx.signal }),
      api.get(api.sub(id, '/status'), { signal: ctx.signal }),
      api.get(api.sub(id, '/keys?limit=100'), { signal: ctx.signal }),
    ]);
    sub = s;
    status = st;
    keys = ks;
    rate.add(Date.now(), api.progress(st));
    if (ctx.live()) render();
  }

  return { el, refresh };
}

// confirmDialog shows a modal dialog (focus kept inside, Escape cancels)
// and resolves to whether the operator confirmed.
export function confirmDialog(title, content, confirmLabel) {
  return new Promise((resolve) => {
    const yes = h('button', { type: 'button', class: 'primary', id: 'confirm' }, confirmLabel);
    const no = h('button', { type: 'button', id: 'cancel' }, 'Cancel');
    const dialog = h('dialog', { 'aria-labelledby': 'dialog-title' },
      h('h2', { id: 'dialog-title' }, title), content, h('div', { class: 'buttons' }, yes, no));
    const close = (v) => {
      dialog.close();
      dialog.remove();
      resolve(v);
    };
    yes.addEventListener('click', () => close(true));
    no.addEventListener('click', () => close(false));
    dialog.addEventListener('cancel', (ev) => {
      ev.preventDefault();
      close(false);
    });
    document.body.append(dialog);
    dialog.showModal();
    no.focus();
  });
}
