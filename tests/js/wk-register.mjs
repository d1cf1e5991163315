// Loaded with `node --import ./wk-register.mjs`: installs the SDK hooks and a WebSocket global.
import { register } from 'node:module';
import WebSocket from 'ws';

register('./wk-hooks.mjs', import.meta.url);
if (typeof globalThis.WebSocket === 'undefined') {
  globalThis.WebSocket = WebSocket;
}
