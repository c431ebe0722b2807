"""What decides a run's answer: the one settings comparison, and the keys an answer is found by.

Every "is this the same setup?" question asks this module: `--resume` (a flag given beside it must
not change the run), `batch` and `eval` going on from their results file, the MCP server continuing
an interrupted run, and answer reuse. `DECIDING` is the one list of the agent settings that decide an
answer; `deciding` reads them from a config or a stored run (a store older than a setting has its
default), and `differences` compares two.

A finished answer is reused when its `AnswerKey.answer` matches: a digest of the question as sent,
the deciding settings, the model (its file, known by path, size and modification time, never by
hashing gigabytes; or a served model's name), what of the engine shapes the prompts (a chat
template), how the documents are read (OCR, a password) and the documents by content (each one's
sha256, in order; for several, the titles the model sees beside them). `AnswerKey.lineage` is the
same less the documents' content (their paths instead): a run with that key read an earlier version
of the same files, and a document that grew is continued from it (see agent.run_loop), each step
taken only where its chunk's token ids are the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from ..ingest.sources import STDIN_PATH, Source, file_sha256
from ..model.backends import EngineOptions
from .config import AgentConfig
from .protocols import get as get_protocol

# The agent settings that decide an answer (AgentConfig's fields): a run, a result line or a stored
# answer made with other values is another run's.
DECIDING = (
    "protocol",
    "chunk_tokens",
    "memory_tokens",
    "answer_tokens",
    "question_tokens",
    "temperature",
    "top_p",
    "seed",
    "final",
    "early_stop",
    "instructions",
    "answer_schema",
    "answer_schema_multi",
)
# What a key holds changes with this number; keys made under another match nothing.
KEY_VERSION = 1


def deciding(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The deciding settings of a config's `to_dict()` or a stored run's settings, each at its
    default where a store older than the setting has none. A setting that does not apply is None:
    `early_stop` for a protocol without a planner, `answer_schema_multi` without a schema."""
    defaults = AgentConfig().to_dict()
    out = {name: settings.get(name, defaults[name]) for name in DECIDING}
    if not get_protocol(str(out["protocol"])).planner:
        out["early_stop"] = None
    if not out["answer_schema"]:
        out["answer_schema_multi"] = None
    return out


def flag_of(setting: str) -> str:
    """The parameter name of the command-line flag that sets `setting` (an AgentConfig field)."""
    return {"answer_schema": "schema", "answer_schema_multi": "schema_multi"}.get(setting, setting)


class Difference(NamedTuple):
    """A deciding setting whose value differs: its name, the stored value, the wanted one."""

    name: str
    stored: Any
    wanted: Any

    @property
    def option(self) -> str:
        """The command-line option that sets it."""
        return "--" + flag_of(self.name).replace("_", "-")


def differences(stored: Mapping[str, Any], wanted: Mapping[str, Any], *, ignore: Sequence[str] = ()) -> list[Difference]:
    """The deciding settings (less `ignore`) on which a stored run's settings and wanted ones differ."""
    a, b = deciding(stored), deciding(wanted)
    return [Difference(name, a[name], b[name]) for name in DECIDING if name not in ignore and a[name] != b[name]]


def key_question(question: str, config: AgentConfig) -> str:
    """The question as a key holds it: stripped, the one a schema's fields make where none is given,
    in NFC (two spellings of one text that the models' tokenizers read alike are one question)."""
    return unicodedata.normalize("NFC", config.question_asked(question))


@dataclass(frozen=True)
class AnswerKey:
    """The keys of one run (see the module docstring). `answer` is None where the documents'
    content is not known before they are read (standard input): such a run is never reused."""

    answer: str | None
    lineage: str

    def to_dict(self) -> dict[str, str | None]:
        return {"answer": self.answer, "lineage": self.lineage}


def file_identity(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """A model file as a key knows it: where it is, its size and when it last changed."""
    if not path:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return {"path": os.path.abspath(path)}
    return {"path": os.path.realpath(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def answer_key(
    question: str,
    config: AgentConfig,
    *,
    model: str | os.PathLike[str] | None,
    engine: EngineOptions,
    sources: Sequence[Source],
    ocr: str = "auto",
    password: bool = False,
    text: str | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> AnswerKey:
    """The keys of a run of `question` over `sources` (found: folders expanded) with this model,
    engine and settings. `model` is the GGUF (the embedded engine's model, or the vocabulary of a
    served run; None: the server's own). Hashes each file source (once per process, see
    file_sha256); reads no document text and loads no model. `text`: the document is this text,
    given inline (a `batch` line's context), and `sources` its one stand-in, named by its title.
    `history`: the earlier turns of the conversation a follow-up is asked in (question, answer),
    which its problem holds."""
    from ..version import __version__

    if ocr == "never":
        reading: dict[str, Any] = {"ocr": ocr}
    else:
        from ..ingest.ocr import ocr_available

        # Scanned pages read as text only where the OCR extra is installed: installing it changes the text.
        reading = {"ocr": ocr, "ocr_installed": ocr_available()}
    common = {
        "key": KEY_VERSION,
        "memagent": __version__,  # a release's readers may give other text for the same file
        "question": key_question(question, config),
        "settings": deciding(config.to_dict()),
        "model": file_identity(model),
        "engine": engine.decides(),
        "reading": {**reading, "password": password},
    }
    if history:  # only where there is one: a question asked alone keeps the key it always had
        common["history"] = [
            [unicodedata.normalize("NFC", q.strip()), unicodedata.normalize("NFC", a.strip())] for q, a in history
        ]
    if text is not None:
        places: list[list[Any]] = [["text", s.title] for s in sources]
        contents: list[list[Any]] | None = [["text", hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()]]
    else:
        places = [[os.path.abspath(s.path) if s.path != STDIN_PATH else STDIN_PATH, list(s.member)] for s in sources]
        contents = _contents(sources)
    answer = None if contents is None else _digest({**common, "documents": contents})
    return AnswerKey(answer, _digest({**common, "places": places}))


def _contents(sources: Sequence[Source]) -> list[list[Any]] | None:
    """The documents by content, in order; None where one is a stream (stdin, a pipe, a FIFO): its
    content is known only once read, and hashing it first would consume the text the run must read.
    One document is its text alone: its name is not read, so a renamed file is the same document;
    of several, the model reads each one's title before its text."""
    several = len(sources) > 1
    if any(s.stream for s in sources):
        return None
    return [[s.title if several else None, file_sha256(s.path), list(s.member)] for s in sources]


def _digest(parts: Mapping[str, Any]) -> str:
    text = json.dumps(parts, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Continued:
    """An earlier run of the same question over earlier versions of the same documents (same
    `AnswerKey.lineage`), which a run goes on from: its `steps` as stored, each with the `digest`
    of the chunk it read (chunking.Chunk.digest). The run takes each stored step whose chunk is
    the same as its own, in order, and reads from the first that is not."""

    run: str
    steps: Sequence[Mapping[str, Any]]
