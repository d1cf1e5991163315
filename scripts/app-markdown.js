// The entry point of lineup_plugin/app/vendor/markdown.js (built by scripts/bundle-app): markdown-it,
// the CommonMark parser the App reads the agent's replies with (lineup_plugin/app/markdown.js turns
// its tokens into elements; raw HTML in a reply stays text).
export { default as MarkdownIt } from "markdown-it";
