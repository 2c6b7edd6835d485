"""Console logs: the metrics a trainer prints to stdout, read out of the surrounding text.

Many runs are shared only as the text their trainer printed (`... | tee run.log`).
Three kinds of line carry metrics:

- verl's console logger: `step:12 - actor/entropy:0.41 - critic/score/mean:np.float64(0.56)`
  (`concat_dict_to_str` in verl/utils/logger/aggregate_logger.py). Ray's
  `(TaskRunner pid=..)` prefix, timestamps and colour codes before `step:` are ignored.
- Hugging Face's Trainer (TRL's GRPOTrainer among others) prints each log as a Python
  dict. It carries no step: train logs are numbered 1, 2, 3... in order (times
  `logging_steps` for the optimizer step), an evaluation dict (`eval_*`) joins the train
  log before it, and the final summary (`train_runtime`, ...) is not a step.
- A JSON object per line, read as the JSONL importer reads it.

Every other line (warnings, progress bars, tracebacks) is text, not garbage; a line that
starts like a metric line and cannot be read is garbage.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from monitor.importers.jsonl import read_line
from monitor.importers.parsed import Parsed, as_step

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_VERL = re.compile(r"(?:^|[\s)\]|>])step:\s*(\S+?)\s+-\s+(.*)$")
_HF = re.compile(r"\{'[^{}]*\}")
# pprint of a numpy or torch scalar: np.float64(0.5), numpy.int64(3), tensor(0.5, ...)
_WRAPPED = re.compile(r"^(?:np|numpy|torch)?\.?\w*\(\s*([^,()]+?)\s*(?:,[^()]*)?\)$")
_NUMPY_CALL = re.compile(r"\b(?:np|numpy)\.\w+\(([^()]*)\)")
_SPECIAL = re.compile(r"(?<![-'\w])(-?inf|nan)(?![\w'])")
_HF_TRAIN_KEYS = ("loss", "grad_norm")


def scalar(text: str) -> str:
    """The text of the number a console printed: `0.5`, `nan`, `np.float64(0.5)` and
    `tensor(0.5)` give the number's text; as_value decides whether it is one."""
    text = text.strip()
    wrapped = _WRAPPED.match(text)
    return wrapped.group(1) if wrapped else text


class ConsoleReader:
    """Reads a console log line by line; holds the count of Hugging Face train logs so
    far, which is their step (a watch of a growing log keeps it in its state)."""

    def __init__(self, hf_logs: int = 0) -> None:
        self.hf_logs = hf_logs

    def feed(self, line: str, where: str, parsed: Parsed) -> None:
        """Add the metrics of one line of text to `parsed` (see the module docstring)."""
        text = _ANSI.sub("", line).strip()
        if text.startswith('{"'):
            read_line(text, where, parsed)
            return
        verl = _VERL.search(text)
        if verl is not None:
            self._verl(verl.group(1), verl.group(2), where, parsed)
            return
        for found in _HF.findall(text):
            self._hf(found, where, parsed)

    @staticmethod
    def _verl(raw_step: str, rest: str, where: str, parsed: Parsed) -> None:
        parsed.units += 1
        step = as_step(raw_step)
        if step is None:
            parsed.bad(where, f"step:{raw_step:.40} is not a step")
            return
        fields = []
        for item in rest.split(" - "):
            key, sep, value = item.partition(":")
            if sep and key.strip():
                fields.append((key.strip(), scalar(value)))
            else:
                parsed.non_numeric += 1
        parsed.add_fields(step, fields)

    def _hf(self, text: str, where: str, parsed: Parsed) -> None:
        literal = _SPECIAL.sub(r"'\1'", _NUMPY_CALL.sub(r"\1", text))
        try:
            logs: Any = ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return  # a dict-looking fragment of prose, not a log
        if not isinstance(logs, dict) or not all(isinstance(k, str) for k in logs):
            return
        evaluation = any(k.startswith("eval_") for k in logs)
        if not evaluation and not any(k in logs for k in _HF_TRAIN_KEYS):
            return  # a printed config, sample or the final summary (train_runtime...)
        parsed.units += 1
        if "step" in logs and as_step(logs["step"]) is not None:
            step = as_step(logs.pop("step"))
        else:
            if not evaluation:
                self.hf_logs += 1
            step = self.hf_logs
        parsed.add_fields(step, logs.items())  # type: ignore[arg-type]


def parse_console(path: Path) -> Parsed:
    """Read a console log (see the module docstring for the lines it understands)."""
    parsed = Parsed(unit="metric line")
    reader = ConsoleReader()
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    for lineno, line in enumerate(text.splitlines(), start=1):
        reader.feed(line, f"line {lineno}", parsed)
    return parsed
