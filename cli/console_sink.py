"""The pipeline's sink for `nbl compress`: the terminal instead of the job's rows.

Stage starts and the check and publish results go to stderr as one line each (the engine's tqdm bars
show the progress within calibration, scoring and evaluation); warnings and the --gate checks always.
Results are kept for the command's own table and JSON, which read worker.pipeline_io's PipelineResult.
"""

from __future__ import annotations

import sys

CHATTY = ("check", "publish")  # stages whose every message is a result worth a line


class ConsoleSink:
    def __init__(self, verbose: bool, stream=None):
        self.verbose, self.stream = verbose, stream or sys.stderr
        self.stage: str | None = None
        self.warnings: list[str] = []
        self.gate_checks: dict | None = None  # {"passed", "checks"} of --gate (worker/gates.py)

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def progress(self, stage: str, fraction: float, message: str) -> None:
        if self.verbose and (stage != self.stage or stage in CHATTY):
            self._say(f"[{stage}] {message}")
        self.stage = stage

    def warning(self, message: str) -> None:
        self.warnings.append(message)
        self._say(f"warning: {message}")

    def gates(self, result: dict) -> None:
        from cli.gates import check_lines

        self.gate_checks = result
        for line in check_lines(result):
            self._say(line)

    # The rest is in the PipelineResult the command prints; a job's sink stores it.
    def metrics(self, variant: str, values: dict[str, float]) -> None: ...
    def layer_scores(self, scores: list[dict]) -> None: ...
    def selection(
        self,
        mode: str,
        selected: dict[int, list[int]],
        measured: dict | None = None,
        family: str | None = None,
        dtypes: dict[int, str] | None = None,
    ) -> None: ...
    def output(self, k: int, layers: list[int], published) -> None: ...
    def estimate(self, figures: dict) -> None: ...
