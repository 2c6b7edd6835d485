"""core: what every package shares, torch-free: the vocabulary (IS policies, routing
modes, weight formats, action kinds), the errors a user sees, and the typed-config
machinery (dataclass trees loaded from YAML with dotted overrides).

The trainer, the monitor and the dashboard import it; it imports none of them.
"""
