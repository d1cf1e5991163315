// @ts-check
// Where the App connects and with which token. The printed link carries the token in the URL
// fragment (#token=...), which never reaches any server; we store it and remove it from the address bar.

const TOKEN_KEY = "lineup.token";
const HOST_KEY = "lineup.host";

/** Take `token` (and optional `host`) out of location.hash, store them, and clean the address bar. */
export function takeTokenFromFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const token = params.get("token");
  if (token === null) return false;
  localStorage.setItem(TOKEN_KEY, token);
  const host = params.get("host");
  if (host) localStorage.setItem(HOST_KEY, host);
  history.replaceState(history.state, "", location.pathname + location.search);
  return true;
}

/** The stored credentials: {host, token}; host defaults to the server that served this page. */
export function loadCredentials() {
  return { host: localStorage.getItem(HOST_KEY) || location.host, token: localStorage.getItem(TOKEN_KEY) || "" };
}

/** Remember the credentials the user typed. */
export function saveCredentials({ host, token }) {
  if (host && host !== location.host) localStorage.setItem(HOST_KEY, host);
  else localStorage.removeItem(HOST_KEY);
  localStorage.setItem(TOKEN_KEY, token);
}

/** Forget the token (after the agent refused it, or when the user disconnects). */
export function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
}

/** The WebSocket URL of the agent at `host` (ws: on http pages, wss: on https pages). */
export function socketUrl(host) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const bare = host.replace(/^[a-z]+:\/\//i, "").replace(/\/.*$/, "");
  return `${scheme}//${bare}/ws`;
}
