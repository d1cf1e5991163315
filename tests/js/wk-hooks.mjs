// ESM resolve/load hooks that let Node 20 run wukongimjssdk@1.0.4 unchanged.
// The package ships ES modules in lib/*.js without "type": "module" and imports
// "./proto" (no extension) and "." (a directory); Node's ESM resolver refuses both.
const SDK_DIR = '/node_modules/wukongimjssdk/';

export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    const fromSdk = context.parentURL && context.parentURL.includes(SDK_DIR);
    if (!fromSdk || !specifier.startsWith('.')) throw error;
    const candidates = specifier === '.' || specifier.endsWith('/')
      ? [`${specifier.replace(/\/?$/, '/')}index.js`]
      : [`${specifier}.js`, `${specifier}/index.js`];
    for (const candidate of candidates) {
      try {
        return await nextResolve(candidate, context);
      } catch {
        // try the next candidate
      }
    }
    throw error;
  }
}

export async function load(url, context, nextLoad) {
  if (url.includes(`${SDK_DIR}lib/`) && url.endsWith('.js')) {
    return nextLoad(url, { ...context, format: 'module' });
  }
  return nextLoad(url, context);
}
