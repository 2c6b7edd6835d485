"""app: the program's entry, the `minirl` command (`cli.py`) and `minirl demo` (`demo.py`).

The only package that wires the others together: the dispatcher names every command's
module and imports it on demand; the demo runs the trainer beside the dashboard. Nothing
imports `app`.
"""
