"""What the two server front ends (`mcp`, `serve`) share: how many readings run at once and how
scans are read (`ServingFlags`, one parameter through options.flag_groups), and the folders a
server may read, checked before it starts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_USAGE, MemagentError
from ..ingest.base import OcrMode
from ..model.runtime import MAX_SEQUENCES
from ..runs.setup import RunSetup
from .options import OcrChoice, OcrOpt, ParallelOpt


@dataclass(frozen=True)
class ServingFlags:
    """--parallel and --ocr, as a server takes them."""

    parallel: ParallelOpt = 4
    ocr: OcrOpt = OcrChoice.auto

    def slots(self, run: RunSetup) -> int:
        """Readings at once: --parallel, within what one llama.cpp context batches where the engine is embedded."""
        return self.parallel if run.engine.served else min(self.parallel, MAX_SEQUENCES)

    def ocr_mode(self) -> OcrMode:
        return self.ocr.value


def real_folders(folders: list[Path] | None, flag: str = "", hint: str | None = None) -> tuple[str, ...]:
    """Each folder named (the working directory where none is) on its real path, once; a usage
    error for one that is not a folder. `flag`: how the error names where it was given."""
    found = []
    for folder in folders or [Path.cwd()]:
        real = os.path.realpath(folder.expanduser())
        if not os.path.isdir(real):
            raise MemagentError(f"{flag}{folder}: no such folder.", hint, exit_code=EXIT_USAGE)
        found.append(real)
    return tuple(dict.fromkeys(found))
