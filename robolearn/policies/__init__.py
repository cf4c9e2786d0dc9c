"""Policy models, each with a config dataclass registered by name (``policy=<name>``)."""
