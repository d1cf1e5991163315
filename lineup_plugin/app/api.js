// @ts-check
// The agent's token-checked JSON API beside the App's files (GET /api/...), for a page the agent
// itself served: plugin renderers and the metering of the status view.

/** A `get(path)` for the agent at `host` with `token`, or null when this page was not served by it. */
export function agentApi(host, token) {
  if (!token || host !== location.host) return null; // the page's CSP allows its own origin only
  return async (path) => {
    const response = await fetch(path, {
      headers: { Authorization: `Bearer ${token}` },
      cache: "no-store",
      credentials: "omit",
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.error || `the agent answered ${response.status}`);
    return data;
  };
}
