// Every call the page makes goes through here: the documented API of
// `tollgate serve`, with the reviewer's token from this browser session.

const KEY = 'tollgate.token';

/**
 * Where the API is: the path the page was served at, without a final `/`
 * (empty at the root, `/tollgate` when a service nests the API there).
 */
const BASE = location.pathname.replace(/\/+$/, '');

/** The server wants a token (none given, or not its own). */
export class Unauthorized extends Error {}

/** An answer of the API that is not a success: `{"error": {kind, message}}`. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `the server answered HTTP ${status}`);
    this.status = status;
    this.kind = body?.error?.kind ?? 'unknown';
  }
}

/** The token, kept for this browser tab's session only. */
export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

/** Calls the API; the answer's JSON, or throws `Unauthorized` / `ApiError`. */
export async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  const secret = token.get();
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(BASE + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (response.status === 401) throw new Unauthorized(data?.error?.message ?? 'a token is needed');
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/**
 * Opens one of the server's WebSockets. Browsers cannot set
 * `Authorization` on a WebSocket, so the token goes as the subprotocol
 * `tollgate.token.HEX`; the server selects `tollgate`.
 */
export function socket(path, onMessage, onClose) {
  const url = new URL(BASE + path, location.href);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  const protocols = ['tollgate'];
  const secret = token.get();
  if (secret) protocols.push(`tollgate.token.${hex(secret)}`);
  const ws = new WebSocket(url, protocols);
  ws.addEventListener('message', (message) => {
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return;
    }
    onMessage(data);
  });
  if (onClose) ws.addEventListener('close', onClose);
  return ws;
}

function hex(text) {
  return Array.from(new TextEncoder().encode(text), (byte) => byte.toString(16).padStart(2, '0')).join('');
}
