"""`minirl bench speed`: what the toolkit costs, measured side by side in one run (cli.py).

Imports nothing here: `trl_step.py` runs inside TRL's own environment as
`python -m bench.speed.trl_step`.
"""
