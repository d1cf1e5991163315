"""Benchmarks of lineup-plugin: run ``python -m benchmarks`` (``--quick`` for a smoke run).

Every comparison is measured side by side in the same run: the variants are set up once and then
interleaved in rounds, so load from other processes hits them alike and their ratios stay
meaningful on a shared machine. App clients, raw echo clients, the MCP client and the fake
WuKongIM server run in child processes (``python -m benchmarks.peers``), as they would on other
machines; every latency is timed inside the agent process.
"""
