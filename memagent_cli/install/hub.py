"""Fetching GGUF models from the Hugging Face Hub: the download layer under `memagent models pull`.

This module owns four things and nothing else:

- parsing a Hub model spec (`hf:OWNER/REPO[:QUANT | /FILE.gguf]`, `resolve_spec`);
- listing a repository's files with their size and LFS sha256 (`list_files`, `list_gguf_files`, one
  `HfApi.model_info(files_metadata=True)` call, i.e. GET {HF_ENDPOINT}/api/models/{repo}/revision/{rev}?blobs=true);
- choosing one file by quantization (`quant_of`, `pick_file`);
- downloading it resumably and atomically to an exact path (`download`).

Where models live, what they are called and how they are recorded is the caller's business.

The download is a plain HTTP GET of the URL `huggingface_hub.hf_hub_url()` builds (so HF_ENDPOINT is
honoured), sent through huggingface_hub's own HTTP client (`get_session()`: its TLS setup, proxies and
offline switch) with its auth headers (`build_hf_headers()`: HF_TOKEN or the `hf auth login` token).
We do not use `hf_hub_download` because we want what it does not give: the file at exactly `dest`
(not a cache or local_dir layout with .cache/ folders beside it), a partial file we control so that
a cut-off pull resumes with `Range: bytes=N-` in the next run, a progress callback, and an sha256
check of the whole file before it is put in place.

huggingface_hub is imported inside functions so `memagent --help` does not pay for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO, Literal
from urllib.parse import urlsplit

from ..errors import EXIT_USAGE, MemagentError
from ..model.convert.quantize import DEFAULT_QUANT
from ..model.memory import format_bytes

if TYPE_CHECKING:
    from hashlib import _Hash

# Room left over after a download: a disk filled to the last byte breaks everything else on it.
DISK_MARGIN = 64 * 1024 * 1024


class NotOnHub(MemagentError):
    """The repository, or a file of the asked kind in it, does not exist: a caller with other
    candidate repositories may try the next one (unlike network or auth failures)."""


_HASH_BLOCK = 1024 * 1024
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}

_AUTH_HINT = "Log in with `hf auth login` or set HF_TOKEN to a token that has access"
_OFFLINE_HINT = "Unset HF_HUB_OFFLINE or drop --offline to allow downloads"
_NETWORK_HINT = "Check the connection, or use --offline with a local GGUF file"
_SPEC_FORMS = "Use hf:OWNER/REPO, hf:OWNER/REPO:QUANT (e.g. hf:owner/name-GGUF:Q4_K_M) or hf:OWNER/REPO/FILE.gguf"


@dataclass(frozen=True)
class HubFile:
    """One GGUF file of a Hub repository, as the Hub listed it."""

    repo: str  # "owner/name"
    filename: str  # path inside the repo, e.g. "RL-MemoryAgent-7B-Q4_K_M.gguf" or "sub/x.gguf"
    size: int | None
    sha256: str | None  # the LFS sha256 the Hub reports (None if the Hub gives none)
    revision: str  # commit sha the listing was made at
    blob_id: str | None = None  # the git blob id of a file kept in plain git (config.json...): checked instead


# -- specs and quantizations ----------------------------------------------------------------

# Hub names: letters, digits, "-", "_", "." (not first), as huggingface_hub's validator accepts.
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO_RE = re.compile(rf"({_NAME})/({_NAME})")
_QUANT_SPEC_RE = re.compile(r"[A-Za-z0-9_]+")


def resolve_spec(spec: str) -> tuple[str, str | None, str | None]:
    """Parses "hf:OWNER/REPO[:QUANT | /FILE.gguf]" into (repo, quant lower-cased, filename)."""

    def bad(why: str) -> MemagentError:
        return MemagentError(f"{spec!r} is not a Hub model: {why}", hint=_SPEC_FORMS, exit_code=EXIT_USAGE)

    if not spec[:3].lower() == "hf:":
        raise bad("it does not start with hf:")
    rest = spec[3:].strip()
    quant: str | None = None
    filename: str | None = None
    if ":" in rest:
        rest, quant = rest.split(":", 1)
        if not _QUANT_SPEC_RE.fullmatch(quant):
            raise bad(f"{quant!r} is not a quantization such as Q4_K_M")
        quant = quant.lower()
    parts = rest.split("/")
    if len(parts) > 2:
        if quant is not None:
            raise bad("give either a :QUANT or a /FILE.gguf, not both")
        filename = "/".join(parts[2:])
        if not filename.lower().endswith(".gguf") or any(p in ("", ".", "..") for p in parts[2:]):
            raise bad(f"{filename!r} is not a .gguf file in the repository")
    repo = "/".join(parts[:2])
    match = _REPO_RE.fullmatch(repo)
    if match is None or any(".." in name or "--" in name for name in match.groups()):
        raise bad(f"{repo!r} is not OWNER/REPO")
    return repo, quant, filename


# A llama.cpp quantization tag: Q4_K_M, Q8_0, Q4_0_4_4, IQ4_XS, IQ2_XXS, TQ1_0, F16, BF16, F32,
# MXFP4; standing alone between separators so "Qwen2" or "7B" are never taken for one.
_QUANT_RE = re.compile(
    r"(?:^|(?<=[-._ ]))((?:I?Q|TQ)\d+(?:_[A-Z0-9]{1,4})*|BF16|FP?16|FP?32|MXFP4(?:_MOE)?)(?=$|[-._ ])",
    re.IGNORECASE,
)
# Split GGUFs ("x-Q4_K_M-00001-of-00003.gguf") need all parts and llama.cpp's split loading: not supported.
_SPLIT_RE = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


def quant_of(filename: str) -> str | None:
    """The quantization tag in a GGUF file name, lower-case ("x-Q4_K_M.gguf" -> "q4_k_m"), or None."""
    name = filename.rsplit("/", 1)[-1]
    if name.lower().endswith(".gguf"):
        name = name[: -len(".gguf")]
    found = _QUANT_RE.findall(name)
    # The last tag wins: a name may carry a version such as "Q2" before the real tag.
    return found[-1].lower() if found else None


def _is_split(filename: str) -> bool:
    return _SPLIT_RE.search(filename) is not None


def _is_projector(filename: str) -> bool:
    # Vision repos ship "mmproj-*.gguf" beside the model; it is an image encoder, never the model to run.
    return filename.rsplit("/", 1)[-1].lower().startswith("mmproj")


def pick_file(files: list[HubFile], quant: str | None) -> HubFile:
    """The single-file GGUF for `quant` (case-insensitive); with no quant, Q4_K_M if there is one,
    else the smallest file. Split files are skipped."""
    candidates = [f for f in files if f.filename.lower().endswith(".gguf") and not _is_projector(f.filename)]
    if not candidates:
        where = files[0].repo if files else "The repository"
        raise NotOnHub(
            f"{where} has no GGUF model files", hint="memagent runs GGUF models; GGUF repositories usually end in -GGUF"
        )
    repo = candidates[0].repo
    singles = [f for f in candidates if not _is_split(f.filename)]
    available = sorted({q.upper() for q in map(quant_of, (f.filename for f in singles)) if q})

    def available_hint() -> str:
        if available:
            return "Available quantizations: " + ", ".join(available)
        names = ", ".join(sorted(f.filename for f in singles)) or "none"
        return f"Single-file GGUFs: {names} (name one with hf:{repo}/FILE.gguf)"

    wanted = quant.lower() if quant else None
    if wanted is None:
        if not singles:
            raise NotOnHub(
                f"{repo} has only split GGUF files, which memagent cannot load yet",
                hint="Pick a repository with single-file GGUFs",
            )
        if any(quant_of(f.filename) == DEFAULT_QUANT for f in singles):
            wanted = DEFAULT_QUANT
        else:
            return min(singles, key=lambda f: (f.size if f.size is not None else float("inf"), f.filename))

    matches = [f for f in candidates if quant_of(f.filename) == wanted]
    single = [f for f in matches if not _is_split(f.filename)]
    if not matches:
        raise NotOnHub(f"{repo} has no {wanted.upper()} GGUF file", hint=available_hint())
    if not single:
        raise NotOnHub(f"{repo} has {wanted.upper()} only as a split GGUF, which memagent cannot load yet", hint=available_hint())
    if len(single) > 1:
        names = ", ".join(sorted(f.filename for f in single))
        raise MemagentError(
            f"{repo} has several {wanted.upper()} files: {names}", hint=f"Name the one you want: hf:{repo}/FILE.gguf"
        )
    return single[0]


# -- listing --------------------------------------------------------------------------------


def list_gguf_files(repo: str, *, revision: str = "main") -> list[HubFile]:
    """All *.gguf files of `repo` at `revision`, with size and LFS sha256, pinned to the commit listed."""
    return [f for f in list_files(repo, revision=revision) if f.filename.lower().endswith(".gguf")]


def list_files(repo: str, *, revision: str = "main") -> list[HubFile]:
    """Every file of `repo` at `revision`, with size and LFS sha256 (or git blob id), pinned to the commit listed."""
    from huggingface_hub import HfApi, constants

    refuse_offline(False)
    _require_https(constants.ENDPOINT)
    # HfApi() reads constants.ENDPOINT now, not at import: a patched endpoint (tests) is seen.
    # model_info(files_metadata=True) gives the commit sha and every file's LFS sha256 in one request
    # (list_repo_tree gives no commit, and its backoff retries a dead network for half a minute).
    with _hub_errors(repo, revision):
        # A timeout (per connect/read, not in total) so a black-holed network fails instead of hanging.
        info = HfApi().model_info(repo, revision=revision, files_metadata=True, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT)
    commit = info.sha or revision
    files = []
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        files.append(
            HubFile(
                repo=repo,
                filename=sibling.rfilename,
                size=lfs.size if lfs is not None else sibling.size,
                sha256=lfs.sha256 if lfs is not None else None,
                revision=commit,
                blob_id=getattr(sibling, "blob_id", None) if lfs is None else None,
            )
        )
    return sorted(files, key=lambda f: f.filename)


class _hub_errors:
    """Turns huggingface_hub and network errors into one-line MemagentErrors."""

    def __init__(self, repo: str, revision: str | None = None, filename: str | None = None):
        self.repo, self.revision, self.filename = repo, revision, filename

    def __enter__(self) -> _hub_errors:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> Literal[False]:
        if error is None or isinstance(error, MemagentError):
            return False
        translated = _translate(error, self.repo, self.revision, self.filename)
        if translated is error:
            return False  # not ours to explain: let it through as it is
        raise translated from error


def _translate(error: BaseException, repo: str, revision: str | None, filename: str | None) -> BaseException:
    import httpx2
    from huggingface_hub.errors import (
        DisabledRepoError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(error, GatedRepoError):  # before RepositoryNotFoundError, its parent class
        return MemagentError(f"{repo} is gated: accept its terms on the Hub, then download with a token", hint=_AUTH_HINT)
    if isinstance(error, RepositoryNotFoundError):
        # The Hub answers the same for a missing and a private repository.
        return NotOnHub(
            f"No repository {repo} on the Hub", hint=f"Check the name; if it is private, {_AUTH_HINT[0].lower()}{_AUTH_HINT[1:]}"
        )
    if isinstance(error, RevisionNotFoundError):
        return MemagentError(f"{repo} has no revision {revision!r}")
    if isinstance(error, RemoteEntryNotFoundError):
        return MemagentError(f"{repo} has no file {filename!r}", hint=f"See the files with hf:{repo}")
    if isinstance(error, DisabledRepoError):
        return MemagentError(f"{repo} is disabled on the Hub")
    if isinstance(error, HfHubHTTPError):
        status = error.response.status_code if error.response is not None else "an error"
        if status in (401, 403):
            return MemagentError(f"The Hub refused access to {repo} ({status})", hint=_AUTH_HINT)
        return MemagentError(f"The Hub answered {status} for {repo}", hint="Try again later")
    if isinstance(error, HFValidationError):
        return MemagentError(f"{repo!r} is not a Hub repository name", hint=_SPEC_FORMS, exit_code=EXIT_USAGE)
    if isinstance(error, OfflineModeIsEnabled):
        return MemagentError("Downloads are off (HF_HUB_OFFLINE is set)", hint=_OFFLINE_HINT)
    if isinstance(error, httpx2.TransportError):
        return MemagentError(f"The Hub could not be reached ({_endpoint()}): {type(error).__name__}", hint=_NETWORK_HINT)
    return error


# -- download -------------------------------------------------------------------------------


def download(
    file: HubFile,
    dest: Path,
    *,
    progress: Callable[[int, int | None], None] | None = None,
    offline: bool = False,
) -> Path:
    """Fetches `file` to exactly `dest`: resumable (a cut-off pull continues from `dest`.partial in the
    next call) and atomic (`dest` appears only once the whole file is there and its sha256 matches)."""
    from huggingface_hub import hf_hub_url

    refuse_offline(offline)
    url = hf_hub_url(file.repo, file.filename, revision=file.revision)
    _require_https(url)

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    # "a+b": appends keep what an earlier pull got; the same handle reads it back for the hash.
    with open(partial, "a+b") as out:
        try:
            _lock(out, partial)
            have = out.seek(0, os.SEEK_END)
            if file.size is not None and have > file.size:  # not a prefix of this file: start over
                out.truncate(0)
                have = 0
            _check_disk_space(dest.parent, file, have)
            # Hash what is already there first, so the whole file is read once (not again at the end).
            digest = hashlib.sha256()
            out.seek(0)
            while block := out.read(_HASH_BLOCK):
                digest.update(block)
            if file.size is None or have < file.size:
                digest = _fetch(url, out, have, digest, file, progress)
            elif progress is not None:
                progress(have, file.size)
            out.flush()
            got = out.seek(0, os.SEEK_END)
        except BaseException:
            out.close()
            if partial.exists() and partial.stat().st_size == 0:
                partial.unlink()  # an empty partial only clutters the folder
            raise

    if file.size is not None and got != file.size:
        # The server ended the body early without an error: keep the bytes, the next pull resumes.
        raise MemagentError(
            f"Download of {file.filename} stopped at {format_bytes(got)} of {format_bytes(file.size)}",
            hint="Run the same command again: it resumes where it stopped",
        )
    if file.sha256 is None and file.blob_id is not None and _git_blob_id(partial) != file.blob_id.lower():
        partial.unlink(missing_ok=True)
        raise MemagentError(
            f"{file.filename}: checksum mismatch (the Hub says git blob {file.blob_id[:12]}…)",
            hint="The download was deleted; run the pull again",
        )
    if file.sha256 is not None and digest.hexdigest() != file.sha256.lower():
        partial.unlink(missing_ok=True)  # a corrupt file must never be resumed nor installed
        raise MemagentError(
            f"{file.filename}: checksum mismatch (the Hub says sha256 {file.sha256[:12]}…, got {digest.hexdigest()[:12]}…)",
            hint="The download was deleted; run the pull again, and if it fails again the file changed on the Hub",
        )
    os.replace(partial, dest)
    return dest


def _fetch(
    url: str, out: BinaryIO, have: int, digest: _Hash, file: HubFile, progress: Callable[[int, int | None], None] | None
) -> _Hash:
    """GETs the rest of the file (from byte `have`) into `out`, updating `digest`; returns the digest
    (a fresh one when the server ignored the Range and sent the whole file again)."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"  # byte counts and ranges must be those of the file itself
    if have:
        headers["Range"] = f"bytes={have}-"
    received = 0
    with _hub_errors(file.repo, file.revision, file.filename):
        try:
            # follow_redirects: the Hub answers an LFS file with a redirect to its CDN; httpx drops the
            # Authorization header when the redirect leaves the Hub's origin.
            with get_session().stream(
                "GET", url, headers=headers, follow_redirects=True, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
            ) as response:
                _require_https(str(response.url))  # a redirect must not downgrade us to plain HTTP
                if have and response.status_code == 416:
                    return digest  # nothing left to send: the size and sha256 checks decide
                hf_raise_for_status(response)
                if have and response.status_code == 200:
                    # The server ignored our Range and sends the whole file: start the partial over.
                    out.truncate(0)
                    have, digest = 0, hashlib.sha256()
                elif have and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
                    raise MemagentError(
                        f"The Hub sent the wrong part of {file.filename} when resuming", hint=f"Delete {out.name} and pull again"
                    )
                length = response.headers.get("Content-Length")
                total = file.size if file.size is not None else (have + int(length) if length else None)
                out.seek(0, os.SEEK_END)
                if progress is not None:
                    progress(have, total)
                for chunk in response.iter_bytes():  # no chunk_size: a cut keeps every byte that came
                    if not chunk:
                        continue
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    if progress is not None:
                        progress(have + received, total)
        except (httpx2.TransportError, OSError) as error:
            from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

            if isinstance(error, (HfHubHTTPError, OfflineModeIsEnabled)) or not (have or received):
                raise  # nothing saved: said as a Hub/network problem by _hub_errors
            if not isinstance(error, httpx2.TransportError):
                raise  # a local write error (disk full...) is not an interrupted download
            out.flush()
            done = have + received
            of = f" of {format_bytes(file.size)}" if file.size is not None else ""
            raise MemagentError(
                f"Download of {file.filename} was interrupted at {format_bytes(done)}{of}",
                hint="Run the same command again: it resumes where it stopped",
            ) from error
    return digest


def _git_blob_id(path: Path) -> str:
    """git's object id of a file (what the Hub lists for a file kept in plain git): small files only."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def resolve_repo(spec: str) -> tuple[str, str]:
    """Parses "hf:OWNER/REPO[@REVISION]" (a repository of safetensors to convert) into (repo, revision)."""
    body = spec[3:].strip() if spec[:3].lower() == "hf:" else None
    if body is None:
        raise MemagentError(
            f"{spec!r} is not a Hub repository: it does not start with hf:",
            hint="Use hf:OWNER/REPO or hf:OWNER/REPO@REVISION",
            exit_code=EXIT_USAGE,
        )
    repo, _, revision = body.partition("@")
    match = _REPO_RE.fullmatch(repo)
    if (
        match is None
        or any(".." in name or "--" in name for name in match.groups())
        or (_ and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}", revision))
    ):
        raise MemagentError(
            f"{spec!r} is not a Hub repository", hint="Use hf:OWNER/REPO or hf:OWNER/REPO@REVISION", exit_code=EXIT_USAGE
        )
    return repo, revision or "main"


def _lock(out: BinaryIO, partial: Path) -> None:
    """One pull per file at a time: two appending to the same partial would corrupt it."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here; the sha256 check still catches a mix-up
        return
    try:
        fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise MemagentError(f"Another pull is already downloading {partial.name}", hint="Wait for it to finish") from None


def _check_disk_space(folder: Path, file: HubFile, have: int) -> None:
    if file.size is None:
        return
    need = file.size - have + DISK_MARGIN
    free = shutil.disk_usage(folder).free
    if free < need:
        raise MemagentError(
            f"Not enough disk space for {file.filename}: it needs {format_bytes(need)} "
            f"(with a {format_bytes(DISK_MARGIN)} margin), {format_bytes(free)} is free in {folder}",
            hint="Free some space, or pull into a folder on another disk",
        )


def offline_env() -> bool:
    """Whether HF_HUB_OFFLINE asks for no network (read now, not at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def refuse_offline(offline: bool) -> None:
    from huggingface_hub import constants

    env = offline_env()
    # constants.is_offline_mode() is what HF_HUB_OFFLINE was when huggingface_hub was imported.
    if offline or env or constants.is_offline_mode():
        why = "--offline" if offline else "HF_HUB_OFFLINE is set"
        raise MemagentError(f"Downloads are off ({why})", hint=_OFFLINE_HINT)


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _require_https(url: str) -> None:
    """Models are code-adjacent data we run: fetch them only over HTTPS (plain HTTP only from this
    machine itself, which is what tests and local mirrors use)."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK_HOSTS):
        return
    raise MemagentError(
        f"Refusing to download over {parts.scheme or 'an unknown scheme'}: {parts.scheme}://{parts.netloc}",
        hint="Set HF_ENDPOINT to an https:// address (downloads only go over HTTPS)",
    )
