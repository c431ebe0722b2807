"""A recorded run as a page to share shows it: nothing of the machine it ran on.

A trace keeps what resuming and auditing need: absolute paths (the sources', the model's, the
working directory), microsecond timestamps, settings left at None. A page or a Markdown file that
is sent to someone else shows none of that (issue 33):

- sources by the name the run gave them, relative to the directory the run started in (the
  trace's `cwd` setting); a file outside that directory by its name alone;
- the model by its name and its GGUF's file name, never its path;
- times to the second, in UTC ("2026-11-27 04:15:32 UTC");
- settings without the working directory and without empty values; an unset seed reads "random".

`Sharing.run` gives the copy of a run that the Markdown and HTML writers draw; JSONL, which is for
machines, keeps the record whole.
"""

from __future__ import annotations

import copy
import os
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

Record = Mapping[str, Any]

UNSET_SEED = "random"  # what a run without --seed drew its seed from


def shared_time(moment: Any) -> str:
    """An ISO 8601 time as "2026-11-27 04:15:32 UTC"; anything else as it is."""
    if not isinstance(moment, str):
        return "" if moment is None else str(moment)
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return moment
    if parsed.tzinfo is None:  # the store writes UTC; a naive time is taken as UTC too
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _inside(path: str, directory: str) -> str | None:
    """`path` relative to `directory` when it lies under it, else None."""
    try:
        relative = os.path.relpath(path, directory)
    except ValueError:  # another drive on Windows
        return None
    if relative == os.pardir or relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
        return None
    return relative


def shared_path(path: str, cwd: str | None) -> str:
    """`path` as a page to share names it: relative to `cwd` (where the run started) when it lies
    under it, else the file's name alone. A relative path is taken as relative to `cwd`."""
    if not path or path in ("-", "stdin"):
        return path
    if not os.path.isabs(path):
        normal = os.path.normpath(path)
        if normal != os.pardir and not normal.startswith(os.pardir + os.sep):
            return path  # as the user named it, from where the run started
        if cwd is None:
            return os.path.basename(normal) or path
        path = os.path.join(cwd, path)
    if cwd is not None:
        relative = _inside(os.path.normpath(path), os.path.normpath(cwd))
        if relative is not None:
            return relative
    return os.path.basename(os.path.normpath(path)) or path


def model_name(model: Record) -> str:
    """The model by name, never its path: its recorded name (an installed model's, or the name a
    GGUF gives itself) with the GGUF's file name after it, "memagent-7b (memagent-7b-q4_k_m.gguf)";
    the file name alone when no name was recorded; "?" when neither. A served model: its name."""
    name = str(model.get("name") or "")
    file = os.path.basename(str(model.get("path") or "")) or str(model.get("file") or "")
    if name and file and file != name:
        return f"{name} ({file})"
    return name or file or "?"


class Sharing:
    """How the paths of some runs are shown to someone who is not on this machine.

    `cwd` is where the runs started, when known; `sources` are the runs' source records, whose
    titles (the names steps and rows use, "a.zip/inner/b.docx" included) are mapped once to their
    shared form, so that a document inside an archive keeps the part inside the archive.
    """

    def __init__(self, cwd: str | None, sources: Iterable[Record] = (), models: Iterable[Record] = ()):
        self.cwd = cwd
        self.titles: dict[str, str] = {}
        self.replacements: dict[str, str] = {}  # absolute text -> its shared form, for free text (errors)
        for source in sources:
            self._add_source(source)
        for model in models:
            if model.get("path") and os.path.isabs(str(model["path"])):
                self.replacements[str(model["path"])] = model_name(model)

    def _add_source(self, source: Record) -> None:
        title = str(source.get("title") or source.get("path") or "")
        if not title or title in self.titles:
            return
        shown = shared_path(title, self.cwd)
        for file in (source.get("abspath"), source.get("path")):
            # A document in an archive: the archive's file is shared, the part inside it kept.
            if isinstance(file, str) and file and title.startswith(file + "/"):
                shown = shared_path(file, self.cwd) + title[len(file) :]
                break
        self.titles[title] = shown
        for absolute in (title, source.get("abspath"), source.get("path")):
            if isinstance(absolute, str) and os.path.isabs(absolute):
                self.replacements[absolute] = shared_path(absolute, self.cwd) if absolute != title else shown

    def name(self, path: Any) -> str:
        """A source's title or a span's path ("title/part") as the page shows it."""
        text = "?" if path is None else str(path)
        if text in self.titles:
            return self.titles[text]
        for title in sorted(self.titles, key=len, reverse=True):
            if text.startswith(title + "/"):
                return self.titles[title] + text[len(title) :]
        return shared_path(text, self.cwd)

    def text(self, value: Any) -> str:
        """Free text (an error message) with the known absolute paths and the working directory
        replaced by their shared forms."""
        text = str(value)
        for absolute in sorted(self.replacements, key=len, reverse=True):
            text = text.replace(absolute, self.replacements[absolute])
        if self.cwd and os.path.isabs(self.cwd) and self.cwd != os.sep:
            text = text.replace(self.cwd.rstrip(os.sep) + os.sep, "")
        return text

    def setting(self, value: Any) -> Any:
        """A setting's value with absolute paths shared and empty values (None, "") gone."""
        if isinstance(value, Mapping):
            kept = {k: self.setting(v) for k, v in value.items() if k != "cwd"}
            return {k: v for k, v in kept.items() if v not in (None, "", {}, [])}
        if isinstance(value, (list, tuple)):
            return [self.setting(v) for v in value]
        if isinstance(value, str) and os.path.isabs(value):
            return shared_path(value, self.cwd)
        return value

    def settings(self, settings: Record) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        for key, value in settings.items():
            if key == "cwd":  # where the run started: the machine's own path
                continue
            if key == "seed" and value is None:
                shown[key] = UNSET_SEED
                continue
            value = self.setting(value)
            if value in (None, "", {}, []):
                continue
            shown[key] = ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, Mapping) else value
        return shown

    def run(self, run: Record) -> dict[str, Any]:
        """A copy of `run` (a trace dict from the store) with nothing of this machine in it."""
        shared = copy.deepcopy(dict(run))
        shared["started_at"] = shared_time(run.get("started_at")) or None
        shared["ended_at"] = shared_time(run.get("ended_at")) or None
        model = dict(run.get("model") or {})
        shared["model"] = {"name": model.get("name"), "file": os.path.basename(str(model.get("path") or "")) or None}
        if model.get("servers"):
            shared["model"]["servers"] = model["servers"]
        sources = []
        for source in run.get("sources") or []:
            title = source.get("title") or source.get("path")
            kept = {k: v for k, v in source.items() if k not in ("abspath", "path", "title")}
            sources.append({**kept, "path": self.name(title), "title": self.name(title)})
        shared["sources"] = sources
        shared["settings"] = self.settings(run.get("settings") or {})
        for step in shared.get("steps") or []:
            for span in step.get("spans") or []:
                span["path"] = self.name(span.get("path"))
        if run.get("error"):
            shared["error"] = self.text(run["error"])
        return shared


def for_run(run: Record) -> Sharing:
    """The Sharing of one run: its own working directory, sources and model."""
    cwd = (run.get("settings") or {}).get("cwd")
    return Sharing(cwd if isinstance(cwd, str) else None, run.get("sources") or [], [run.get("model") or {}])
