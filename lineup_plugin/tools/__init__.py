"""Tools as the agent sees them: the registry, argument checks, agent-facing schemas and the
in-process tool runner."""
