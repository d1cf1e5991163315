"""LineUp's settings: the pydantic model (:mod:`.settings`), its committed JSON Schema
(:mod:`.schema`) and the fast start-up check that needs no pydantic (:mod:`.check`)."""
