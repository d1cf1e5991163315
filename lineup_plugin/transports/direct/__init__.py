"""Direct mode: the WebSocket server inside the agent (:mod:`.server`), who may talk to it
(:mod:`.auth`) and the App's static files (:mod:`.static`)."""
