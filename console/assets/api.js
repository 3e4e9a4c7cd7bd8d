// api.js talks to the keyhook REST API of the origin that served the
// console. The token lives in sessionStorage (gone when the tab closes)
// and goes in the Authorization header; never in a cookie or a URL.

const TOKEN_KEY = 'keyhook.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// ApiError is an error answer; problem is its RFC 9457 body, if any.
export class ApiError extends Error {
  constructor(status, problem) {
    super(describe(status, problem));
    this.status = status;
    this.problem = problem;
  }
}

function describe(status, p) {
  if (!p || typeof p !== 'object') return 'the API answered ' + status;
  let msg = (p.title || 'error') + ' (' + status + ')';
  if (p.detail) msg += ': ' + p.detail;
  for (const fe of p.errors || []) msg += '; ' + fe.field + ': ' + fe.message;
  return msg;
}

// call sends one request and returns the decoded answer (null for none).
export async function call(method, path, { body, signal } = {}) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, signal, credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

export const get = (path, opts) => call('GET', path, opts);
export const post = (path, body, opts = {}) => call('POST', path, { ...opts, body });

// sub is the path of a subscription, or of one of its resources.
export function sub(id, rest = '') {
  return '/v1/subscriptions/' + encodeURIComponent(id) + rest;
}

// progress is how many offsets of a status are acked: per partition,
// the watermark (or the commit) plus the acked ranges above it. Its
// change over time is the delivery rate.
export function progress(status) {
  let n = 0;
  for (const p of status.partitions || []) {
    n += Math.max(p.watermark, p.committed, 0);
    for (const [lo, hi] of p.acked_ranges || []) n += hi - lo + 1;
  }
  return n;
}

// totals sums a status's lag, pending and in-flight counts, and counts
// the partitions whose holding record has failed at least once.
export function totals(status) {
  const t = { lag: 0, pending: 0, inFlight: 0, failing: 0, parked: 0 };
  for (const p of status.partitions || []) {
    t.lag += p.lag;
    t.pending += p.pending;
    t.inFlight += p.in_flight;
    const hold = p.holding;
    if (hold) {
      if (hold.last_error || (hold.last_status && (hold.last_status < 200 || hold.last_status > 299))) t.failing++;
      t.parked += hold.parked || 0;
    }
  }
  return t;
}

// Rate keeps a rolling window of (time, progress) samples and says the
// delivery rate over it.
export class Rate {
  constructor(windowSize = 60) {
    this.size = windowSize;
    this.samples = [];
  }

  add(at, value) {
    this.samples.push([at, value]);
    if (this.samples.length > this.size) this.samples.shift();
  }

  // perSecond is the rate between the last two samples, null before two.
  perSecond() {
    const n = this.samples.length;
    if (n < 2) return null;
    const [t0, v0] = this.samples[n - 2];
    const [t1, v1] = this.samples[n - 1];
    return t1 > t0 ? Math.max(0, (v1 - v0) * 1000 / (t1 - t0)) : null;
  }

  // series is the rate between each pair of samples: [time, per second].
  series() {
    const out = [];
    for (let i = 1; i < this.samples.length; i++) {
      const [t0, v0] = this.samples[i - 1];
      const [t1, v1] = this.samples[i];
      if (t1 > t0) out.push([t1, Math.max(0, (v1 - v0) * 1000 / (t1 - t0))]);
    }
    return out;
  }
}
