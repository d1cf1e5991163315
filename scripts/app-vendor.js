// The entry point of lineup_plugin/app/vendor/relay.js (built by scripts/bundle-app): the official
// WuKongIM JS SDK and the audited noble primitives the App's end-to-end encryption uses.
export { default as WKSDK } from "wukongimjssdk";
export { Channel, MessageContent, ChannelTypePerson } from "wukongimjssdk/lib/model.js";
export { ConnectStatus } from "wukongimjssdk/lib/connect_manager.js";
export { x25519 } from "@noble/curves/ed25519.js";
export { hkdf } from "@noble/hashes/hkdf.js";
export { sha256 } from "@noble/hashes/sha2.js";
export { gcm } from "@noble/ciphers/aes.js";
