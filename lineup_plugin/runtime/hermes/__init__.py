"""The Hermes Agent runtime adapter."""
