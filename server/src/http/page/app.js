// The review page: a hash router over the views, the sign-in, and what
// happens when the server refuses the token.

import { api, token, Unauthorized } from './api.js';
import { h } from './dom.js';
import { listing } from './list.js';
import { runPage } from './run.js';
import { historyPage } from './history.js';

const main = document.getElementById('main');
let leave = null;
let shown = '';

/** Shows the view the address names. */
async function route() {
  const address = location.hash.replace(/^#/, '') || '/';
  const moved = address.split('?')[0] !== shown.split('?')[0];
  shown = address;
  if (leave) leave();
  leave = null;
  const [path, query] = address.split('?');
  const parts = path.split('/').filter(Boolean);
  const params = new URLSearchParams(query ?? '');
  document.getElementById('sign-out').hidden = !token.get();
  showWho();
  for (const [id, active] of [['nav-inbox', parts.length === 0], ['nav-runs', parts[0] === 'runs']]) {
    const link = document.getElementById(id);
    if (active) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  try {
    if (parts.length === 0) leave = await listing(main, params, { inbox: true, fail });
    else if (parts[0] === 'runs' && parts.length === 1) leave = await listing(main, params, { inbox: false, fail });
    else if (parts[0] === 'run' && parts[2] === 'history') leave = await historyPage(main, parts[1], params, { fail });
    else if (parts[0] === 'run' && parts.length === 2) leave = await runPage(main, parts[1], { fail });
    else main.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, h('a', { href: '#/' }, 'Back to the inbox')));
  } catch (error) {
    fail(error);
  }
  if (moved) main.focus();
}

/** Says who the server takes the reviewer for, when it knows names. */
let whoFor = null;
async function showWho() {
  const who = document.getElementById('who');
  const secret = token.get();
  if (secret === whoFor) return;
  whoFor = secret;
  who.hidden = true;
  try {
    const me = await api('/me');
    if (me?.name) {
      who.textContent = `Signed in as ${me.name} (${me.role})`;
      who.hidden = false;
    }
  } catch {
    // Not signed in yet: the sign-in form says so.
  }
}

/** Shows what went wrong, or the sign-in when the server wants a token. */
// What the sign-in form says the credential is: the embedding service's
// words when it gave them (a meta tag the server writes), else tollgate's.
function signInHelp() {
  const hint = document.querySelector('meta[name="tollgate-sign-in"]');
  if (hint) {
    return h('p', { id: 'token-help' }, hint.content, ' It is kept for this browser tab only.');
  }
  return h('p', { id: 'token-help' }, 'This server needs its token (', h('code', {}, 'TOLLGATE_TOKEN'), ' or ', h('code', {}, '--token-file'), '). It is kept for this browser tab only.');
}

function fail(error) {
  if (leave) leave();
  leave = null;
  if (error instanceof Unauthorized) {
    signIn(error.message);
    return;
  }
  main.replaceChildren(
    h('h1', {}, 'Something went wrong'),
    h('p', { class: 'error', role: 'alert' }, error.message ?? String(error)),
    h('p', {}, h('a', { href: '#/' }, 'Back to the inbox')),
  );
}

/** Asks for the server's token; shows no data until it is right. */
function signIn(reason) {
  const had = Boolean(token.get());
  token.clear();
  document.getElementById('sign-out').hidden = true;
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', required: true, 'aria-describedby': 'token-help token-error' });
  const problem = h('p', { id: 'token-error', class: 'error', role: 'alert' }, had ? 'That token is not the server’s.' : '');
  const form = h('form', { class: 'card narrow', id: 'sign-in', onsubmit: async (event) => {
    event.preventDefault();
    token.set(input.value.trim());
    try {
      await api('/runs?limit=1');
      route();
    } catch (error) {
      token.clear();
      problem.textContent = error instanceof Unauthorized ? 'That token is not the server’s.' : error.message;
      input.focus();
    }
  } },
  h('h1', {}, 'Sign in'),
  signInHelp(),
  h('label', { for: 'token' }, 'Server token'),
  input,
  problem,
  h('button', { type: 'submit', class: 'primary' }, 'Sign in'));
  main.replaceChildren(form);
  if (reason && !had) problem.textContent = '';
  input.focus();
}

document.getElementById('sign-out').addEventListener('click', () => {
  token.clear();
  route();
});
window.addEventListener('hashchange', route);
route();
