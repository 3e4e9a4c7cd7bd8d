// app.js starts the console: it takes a token handed in the URL fragment
// (#token=…, which browsers never send to the server), asks the API what
// the token may do, and routes on the hash to one page at a time, which
// it refreshes every two seconds while it is shown.

import * as api from './api.js';
import { h, replace } from './dom.js';
import { subscriptionsPage } from './subscriptions.js';
import { subscriptionPage } from './subscription.js';
import { deadLettersPage } from './deadletters.js';
import { nodesPage } from './nodes.js';

const REFRESH_MS = 2000;

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const whoName = document.getElementById('who-name');
const notice = document.getElementById('notice');

// current is the page shown: its refresh loop stops when the generation
// moves on.
let generation = 0;
let session = null;

function say(msg, isError = false) {
  notice.textContent = msg || '';
  notice.classList.toggle('error', Boolean(isError && msg));
}

function takeFragmentToken() {
  const m = /^#token=([^&]*)/.exec(location.hash);
  if (!m) return;
  const t = decodeURIComponent(m[1]);
  if (t) api.setToken(t);
  // The token leaves the address bar and the history at once.
  history.replaceState(null, '', location.pathname + location.search + '#/subscriptions');
}

function showLogin(message) {
  generation++;
  session = null;
  nav.hidden = true;
  who.hidden = true;
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true, spellcheck: 'false' });
  const error = h('p', { class: 'error', id: 'login-error', role: 'alert' }, message || '');
  const form = h('form', {
    class: 'login',
    'aria-describedby': 'login-help',
    onsubmit: (ev) => {
      ev.preventDefault();
      api.setToken(input.value.trim());
      start();
    },
  },
  h('h1', { tabindex: -1 }, 'Sign in'),
  h('p', { id: 'login-help' }, 'Paste an API token (keyhook token create, or the one keyhook dev prints). It is kept in this tab only and sent as a bearer header.'),
  h('label', { for: 'token' }, 'API token'),
  input,
  h('button', { type: 'submit' }, 'Sign in'),
  error);
  replace(main, form);
  input.focus();
}

async function start() {
  takeFragmentToken();
  if (!api.token()) {
    showLogin();
    return;
  }
  try {
    const tok = await api.get('/v1/token');
    const scopes = tok.scopes || [];
    session = {
      name: tok.name,
      scopes,
      canWrite: scopes.includes('subscriptions:write') || scopes.includes('admin'),
    };
  } catch (err) {
    if (err instanceof api.ApiError && (err.status === 401 || err.status === 403)) {
      api.clearToken();
      showLogin(err.status === 401 ? 'That token is not valid.' : 'That token may not read subscriptions.');
      return;
    }
    showLogin('The API did not answer: ' + err.message);
    return;
  }
  nav.hidden = false;
  who.hidden = false;
  whoName.textContent = session.name + (session.canWrite ? ' (read and write)' : ' (read only)');
  document.body.classList.toggle('read-only', !session.canWrite);
  if (!location.hash.startsWith('#/')) {
    history.replaceState(null, '', '#/subscriptions');
  }
  route();
}

const routes = [
  [/^#\/subscriptions$/, () => subscriptionsPage],
  [/^#\/subscriptions\/([^/]+)$/, () => subscriptionPage],
  [/^#\/subscriptions\/([^/]+)\/dead-letters$/, () => deadLettersPage],
  [/^#\/nodes$/, () => nodesPage],
];

function route() {
  if (!session) return;
  const gen = ++generation;
  let page = null;
  let params = [];
  for (const [re, p] of routes) {
    const m = re.exec(location.hash);
    if (m) {
      page = p();
      params = m.slice(1).map(decodeURIComponent);
      break;
    }
  }
  for (const a of nav.querySelectorAll('a')) {
    const current = location.hash.startsWith('#/' + a.dataset.page);
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  say('');
  if (!page) {
    replace(main, h('h1', { tabindex: -1 }, 'Not found'), h('p', {}, h('a', { href: '#/subscriptions' }, 'Back to the subscriptions')));
    return;
  }
  const ctl = new AbortController();
  const ctx = {
    session,
    params,
    signal: ctl.signal,
    live: () => gen === generation,
    say,
  };
  const view = page(ctx);
  replace(main, view.el);
  const heading = main.querySelector('h1');
  if (heading) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({ preventScroll: true });
    document.title = heading.textContent + ' · keyhook console';
  }
  const loop = async () => {
    if (gen !== generation) {
      ctl.abort();
      return;
    }
    try {
      await view.refresh();
      if (notice.classList.contains('error') && notice.dataset.from === 'refresh') say('');
    } catch (err) {
      if (gen !== generation || err.name === 'AbortError') return;
      if (err instanceof api.ApiError && err.status === 401) {
        api.clearToken();
        showLogin('The token is no longer valid.');
        return;
      }
      say('Could not refresh: ' + err.message, true);
      notice.dataset.from = 'refresh';
    }
    if (gen === generation) setTimeout(loop, REFRESH_MS);
  };
  loop();
}

// The skip link moves focus; followed as a link it would change the hash,
// which is the router's.
document.querySelector('.skip').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});
document.getElementById('signout').addEventListener('click', () => {
  api.clearToken();
  showLogin('Signed out.');
});
window.addEventListener('hashchange', () => {
  if (/^#token=/.test(location.hash)) {
    start();
    return;
  }
  route();
});
start();
