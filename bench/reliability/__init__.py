"""`minirl bench reliability`: fault injection and fuzzing (cli.py writes the report).

Faults, each into the real command: SIGKILL of `minirl train` at every phase
(kill_train.py, through the instrumented trainer child.py), of a `Monitor` writer with
readers polling its store (kill_writer.py), a full disk (disk_full.py), SIGTERM/SIGINT of
every long-running command (signals.py). Fuzzing with hypothesis (fuzzing.py) of every
input parser: configs and `--set` (fuzz_configs.py), the importers (fuzz_importers.py),
damaged stores (fuzz_store.py), operator, webhook and `Monitor` inputs (fuzz_operator.py).
"""
