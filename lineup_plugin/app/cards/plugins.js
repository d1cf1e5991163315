// @ts-check
// Renderers that plugins ship for their own App tools: ES modules the agent serves from this origin
// (listed by GET /api/renderers, loaded with import() the first time the agent calls the tool).
//
// A renderer module's default export has the shape of the App's own cards:
//   { label: "Rating", interactive: true, render(card, args, context) { ... card.answer(...) } }
// See the README, "Renderers for plugin tools".

import { h } from "../dom.js";

export class PluginRenderers {
  constructor() {
    this.manifest = Promise.resolve({});
    this.modules = new Map(); // module path → Promise of a checked renderer (paths change with content)
  }

  /** Ask the agent again which tools have a renderer (after every welcome); `get` is null without an API. */
  refresh(get) {
    this.manifest = get
      ? get("/api/renderers").then(
          (data) => (data && typeof data.renderers === "object" && data.renderers) || {},
          () => ({}),
        )
      : Promise.resolve({});
  }

  /** The renderer of tool `name`: null when its plugin ships none; rejects saying why it cannot be used. */
  async find(name) {
    const manifest = await this.manifest;
    const path = Object.hasOwn(manifest, name) ? manifest[name] : null;
    if (typeof path !== "string" || !/^\/renderers\/[0-9a-f]{64}\.js$/.test(path)) return null;
    if (!this.modules.has(path)) this.modules.set(path, import(path).then(checked));
    return this.modules.get(path);
  }
}

/** The renderer of a module (its default export), or an error naming what is wrong with it. */
export function checked(module) {
  const renderer = module.default;
  if (!renderer || typeof renderer !== "object" || typeof renderer.render !== "function") {
    throw new Error("its module does not export default { render(card, args, context) }");
  }
  return {
    label: typeof renderer.label === "string" && renderer.label ? renderer.label : "Plugin",
    interactive: renderer.interactive !== false,
    render: (card, args, context) => renderer.render(card, args, context),
  };
}

/** Stands in for a renderer that could not be loaded: the card says so and the agent gets `unsupported`. */
export function broken(name, error) {
  const why = error instanceof Error && error.name !== "Error" ? `${error.name}: ${error.message}` : error?.message || String(error);
  return {
    label: "Unsupported",
    interactive: false,
    render(card) {
      card.body.append(h("p", {}, `The renderer for "${name}" could not be loaded: ${why}`));
      card.answer("unsupported", { message: `the App could not load the renderer of tool "${name}": ${why}` }, "Told the agent");
    },
  };
}
