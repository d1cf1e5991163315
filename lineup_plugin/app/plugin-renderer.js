// @ts-check
// Stands in for a plugin's renderer in the card page of an MCP Apps host (lineup_plugin/runtime/mcp/view.py
// bundles the tool's own renderer module in its place). The App itself never loads this file.
export default null;
