"""Reading a GGUF file's metadata and tensor table without loading any weights.

We need the vocabulary (to build a fast tokenizer), the chat template, the architecture
and sizes before the engine loads anything, and a missing or broken model file should be
reported before minutes go into loading it. The generic `gguf.GGUFReader` takes seconds on
a 152K-token vocabulary; this reader walks the header once with `struct` over an mmap.

Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MemagentError

MAGIC = b"GGUF"

# value type -> struct format for the fixed-size scalar types
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")

# llama.cpp token types (llama_token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass
class GGUFInfo:
    """What a GGUF file says about itself. `metadata` keeps every key; strings decoded,
    except `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`, kept as raw bytes."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    file_size: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        arch: str = self.metadata.get("general.architecture", "unknown")
        return arch

    def arch_get(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped key, e.g. arch_get('context_length') -> 'qwen2.context_length'."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def name(self) -> str:
        return self.metadata.get("general.name") or self.path.stem

    @property
    def has_weights(self) -> bool:
        return bool(self.tensors)

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template")


class _Cursor:
    """Sequential little-endian reads over a buffer, with bounds checked by struct."""

    def __init__(self, buf: Any):
        self.buf = buf
        self.pos = 0

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def raw_string(self) -> bytes:
        n = self.scalar("<Q")
        end = self.pos + n
        if end > len(self.buf):
            raise struct.error("string runs past the end of the file")
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data

    def value(self, vtype: int, raw_strings: bool) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            data = self.raw_string()
            return data if raw_strings else data.decode("utf-8", errors="replace")
        if vtype == _ARRAY:
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if etype == _STRING:
                return self._string_array(count, raw_strings)
            if etype in _SCALARS:
                # one unpack for the whole array: vocabularies have ~150K token types
                fmt = _SCALARS[etype]
                size = struct.calcsize(fmt)
                values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buf, self.pos))
                self.pos += size * count
                return values
            return [self.value(etype, raw_strings) for _ in range(count)]
        raise struct.error(f"unknown GGUF value type {vtype}")

    def _string_array(self, count: int, raw: bool) -> list[bytes] | list[str]:
        # The hot path: a vocabulary is ~300K strings, so one tight loop with locals.
        buf, pos, unpack = self.buf, self.pos, _U64.unpack_from
        out: list[bytes] = []
        append = out.append
        for _ in range(count):
            (n,) = unpack(buf, pos)
            pos += 8
            append(buf[pos : pos + n])
            pos += n
        if pos > len(buf):
            raise struct.error("string array runs past the end of the file")
        self.pos = pos
        return out if raw else [b.decode("utf-8", errors="replace") for b in out]


# Keys whose strings stay bytes: token text is not guaranteed to be valid UTF-8.
_RAW_KEYS = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}


def read_gguf(path: str | Path) -> GGUFInfo:
    """Parse the header of a GGUF file. Raises MemagentError for anything that is not one."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = path.stat().st_size
            if size < 24:
                raise MemagentError(
                    f"{path} is not a GGUF model file (it is only {size} bytes).", "Pass a .gguf file to --model."
                )
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse(path, mm, size)
    except FileNotFoundError:
        raise MemagentError(f"Model file not found: {path}", "Check the path given to --model or MEMAGENT_MODEL.") from None
    except IsADirectoryError:
        raise MemagentError(
            f"{path} is a directory, not a model file.",
            "Pass a .gguf file to --model; a Hugging Face checkpoint folder becomes one with: memagent models convert FOLDER",
        ) from None
    except PermissionError:
        raise MemagentError(f"Permission denied reading {path}.") from None


def _parse(path: Path, buf: Any, size: int) -> GGUFInfo:
    if bytes(buf[:4]) != MAGIC:
        raise MemagentError(
            f"{path} is not a GGUF model file.",
            "memagent runs GGUF models (llama.cpp's format); make one from a Hugging Face checkpoint folder "
            "with: memagent models convert FOLDER",
        )
    cur = _Cursor(buf)
    cur.pos = 4
    try:
        version = cur.scalar("<I")
        if version < 2:
            raise MemagentError(f"{path} is GGUF version {version}, which is too old.", "Re-convert it with a current llama.cpp.")
        n_tensors = cur.scalar("<Q")
        n_kv = cur.scalar("<Q")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.raw_string().decode("utf-8", errors="replace")
            vtype = cur.scalar("<I")
            metadata[key] = cur.value(vtype, raw_strings=key in _RAW_KEYS)
        tensors = []
        for _ in range(n_tensors):
            name = cur.raw_string().decode("utf-8", errors="replace")
            n_dims = cur.scalar("<I")
            shape = tuple(cur.scalar("<Q") for _ in range(n_dims))
            ggml_type = cur.scalar("<I")
            offset = cur.scalar("<Q")
            tensors.append(TensorInfo(name, shape, ggml_type, offset))
    except struct.error as exc:
        raise MemagentError(f"{path} is a truncated or damaged GGUF file ({exc}).", "Download or convert it again.") from None
    return GGUFInfo(path=path, version=version, metadata=metadata, tensors=tensors, file_size=size)


# llama.cpp's llama_ftype names for general.file_type (the common ones).
FILE_TYPES = {
    0: "f32",
    1: "f16",
    2: "q4_0",
    3: "q4_1",
    7: "q8_0",
    8: "q5_0",
    9: "q5_1",
    10: "q2_k",
    11: "q3_k_s",
    12: "q3_k_m",
    13: "q3_k_l",
    14: "q4_k_s",
    15: "q4_k_m",
    16: "q5_k_s",
    17: "q5_k_m",
    18: "q6_k",
    19: "iq2_xxs",
    20: "iq2_xs",
    30: "iq4_xs",
    32: "bf16",
}
