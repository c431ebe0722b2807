"""Getting a model installed: a plan that says what it costs, then stages that can be resumed.

`memagent models pull` and `models convert` (and the offer `ask` makes on first use) first make a
`Plan`: what will be downloaded, how much disk the work needs at its peak, and roughly how long each
stage takes. Only listing requests have been sent by then, so the user sees the cost before the
first byte is downloaded, and the free-space check covers the peak. `execute` then runs the stages:

- download: a GGUF file, or a checkpoint's files (config, tokenizer, safetensors shards), each
  resumable and checked (hub.download);
- convert: safetensors -> GGUF (convert.writer), to the final file when no quantizing is asked,
  else to an intermediate of the checkpoint's own precision (bf16 stays bf16: lossless and a copy);
- quantize: llama.cpp's quantizer (convert.quantize).

A conversion works in a staging folder, `<models>/.staging/<owner>--<repo>@<commit>/`, one per
source, locked while a pull runs in it. What a finished stage made is kept there until the model is
installed, so an interrupted pull resumes at the stage it was in; the downloaded shards are deleted
once the intermediate GGUF is complete, and the staging folder once the model is registered. The
model is registered last: a failure at any stage leaves nothing that looks installed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

from ..errors import EXIT_USAGE, MemagentError
from ..model.convert.checkpoint import METADATA_FILES
from ..model.convert.quantize import DEFAULT_QUANT
from ..model.memory import format_bytes, format_duration
from ..paths import models_dir
from . import catalog

if TYPE_CHECKING:
    from ..model.convert.checkpoint import Checkpoint
    from .hub import HubFile
    from .registry import Record

# A write refused for want of space: a full disk, a quota, a file-size limit (RLIMIT_FSIZE).
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

# Rates for the time estimate, in bytes of input a second, from B5 (benchmarks/convert.py) on 2 cores
# (docs/PERFORMANCE.md): converting is bound by the disk, quantizing by the cores llama.cpp uses.
CONVERT_RATE = 200e6
CONVERT_FIXED = 6.0  # seconds to build the GGUF header of a 152K-token vocabulary, whatever the model
QUANTIZE_RATE_PER_CORE = 11e6
DOWNLOAD_RATE = 50e6  # a nominal connection; the estimate says it assumes this

Progress = Callable[[str, int, "int | None"], None]  # (stage, done, total)


@dataclass
class Plan:
    """What a pull or conversion will do and cost; `execute` carries it out."""

    name: str  # the registry name it installs as
    kind: str  # "gguf" (a file from the Hub) or "convert" (safetensors made into a GGUF here)
    quant: str | None
    dest: Path  # the installed file
    source: str  # for the registry: hf:OWNER/REPO/FILE, hf:OWNER/REPO@COMMIT or the folder
    download_bytes: int = 0  # still to download
    peak_disk: int = 0  # most bytes on disk at once, from now on (what is already there is counted)
    result_bytes: int | None = None  # the installed file (an estimate when converting)
    seconds: dict[str, float] = field(default_factory=dict)  # estimated, per stage
    files: list[HubFile] = field(default_factory=list)  # to download
    sha256: str | None = None
    folder: Path | None = None  # a checkpoint folder (local, or the staging copy of a Hub repo, named after it)
    staging: Path | None = None
    outtype: str | None = None  # what the converter writes (the result itself, or the intermediate)
    disk_needed: int = 0  # free disk this run still needs (less than the peak when resuming)

    def describe(self) -> str:
        """One line with the numbers, as the user sees them before anything starts."""
        from ..model.memory import format_bytes

        parts = []
        if self.download_bytes:
            parts.append(f"downloads {format_bytes(self.download_bytes)}")
        if self.kind == "convert":
            steps = "converts" + (f" and quantizes to {self.quant}" if "quantize" in self.seconds else f" to {self.quant}")
            parts.append(steps + (f" (~{format_bytes(self.result_bytes)})" if self.result_bytes else ""))
        parts.append(f"needs {format_bytes(self.peak_disk)} of free disk at its peak")
        total = sum(self.seconds.values())
        timing = ", ".join(
            f"{stage} {format_duration(s)}" + (f" at {DOWNLOAD_RATE / 1e6:.0f} MB/s" if stage == "download" else "")
            for stage, s in self.seconds.items()
        )
        parts.append(f"takes about {format_duration(total)} ({timing})")
        return "; ".join(parts)


# -- planning -------------------------------------------------------------------------------


def plan_pull(spec: str, *, quant: str | None = None, name: str | None = None, offline: bool = False) -> Plan:
    """The plan for `models pull SPEC`: a GGUF from the Hub, or the catalog's published weights
    (or an hf: repository of safetensors) converted here when no GGUF build has the quantization."""
    from . import hub

    hub.refuse_offline(offline)  # before any listing touches the network
    if spec.startswith("hf:"):
        repo, spec_quant, filename = hub.resolve_spec(spec)
        if quant and spec_quant and quant.lower() != spec_quant:
            raise MemagentError(
                f"{spec} asks for {spec_quant} and --quant for {quant}", "Give the quantization once", exit_code=EXIT_USAGE
            )
        wanted = quant or spec_quant
        files = hub.list_files(repo)
        ggufs = [f for f in files if f.filename.lower().endswith(".gguf")]
        if filename is not None:
            matches = [f for f in ggufs if f.filename == filename]
            if not matches:
                raise MemagentError(
                    f"{repo} has no file {filename}.", f"It has: {', '.join(f.filename for f in ggufs) or 'no GGUF files'}."
                )
            return _gguf_plan(matches[0], name or spec)
        if not ggufs and _is_checkpoint(files):
            return _convert_plan_hub(repo, files, _quant(wanted), name)
        label = name or (spec if not quant else f"hf:{repo}:{quant.lower()}")
        return _gguf_plan(hub.pick_file(files, wanted.lower() if wanted else None), label)
    entry, alias_quant = catalog.require(spec)
    wanted = _quant(quant or alias_quant)
    label = name or f"{entry.alias}:{wanted}"
    tried = []
    for repo in entry.candidates:
        try:
            return _gguf_plan(hub.pick_file(hub.list_gguf_files(repo), wanted), label)
        except hub.NotOnHub:  # network or access failures are not worth trying the next one for
            tried.append(repo)
    try:
        files = hub.list_files(entry.weights)
    except hub.NotOnHub as missing:
        raise MemagentError(
            f"No Hub repository has a {wanted} GGUF of {entry.alias} (tried {', '.join(tried)}), "
            f"and its published weights cannot be listed: {missing.message}",
            missing.hint,
        ) from None
    if not _is_checkpoint(files):
        raise MemagentError(
            f"No Hub repository has a {wanted} GGUF of {entry.alias}, and {entry.weights} holds no "
            "safetensors checkpoint to convert"
        )
    return _convert_plan_hub(entry.weights, files, wanted, label)


def plan_convert(source: str, *, quant: str = DEFAULT_QUANT, name: str | None = None, offline: bool = False) -> Plan:
    """The plan for `models convert SOURCE`: a local checkpoint folder or hf:OWNER/REPO[@REVISION]."""
    from . import hub

    quant = _quant(quant)
    if source.startswith("hf:"):
        repo, revision = hub.resolve_repo(source)
        hub.refuse_offline(offline)
        files = hub.list_files(repo, revision=revision)
        if not _is_checkpoint(files):
            raise MemagentError(
                f"{repo} holds no safetensors checkpoint (config.json and *.safetensors) to convert",
                f"For a GGUF repository use: memagent models pull hf:{repo}",
            )
        return _convert_plan_hub(repo, files, quant, name)
    from ..model.convert.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(source)  # everything checked now, before any writing
    folder = checkpoint.folder.resolve()
    label = name or f"{folder.name}:{quant}"
    dest = models_dir() / "converted" / f"{_safe(folder.name)}-{quant.upper()}.gguf"
    # Keyed by the folder and its shards' sizes and times: an intermediate of older weights is never reused.
    stamp = [os.fsencode(folder)] + [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode() for p in checkpoint.shards]
    digest = hashlib.sha256(b"\0".join(stamp)).hexdigest()[:12]
    staging = models_dir() / ".staging" / f"local--{_safe(folder.name)}-{digest}"
    plan = _conversion_plan(label, quant, str(folder), folder, staging, dest)
    _size_conversion(plan, checkpoint.weight_bytes, params=checkpoint.parameters, dtype=_main_dtype(checkpoint))
    return plan


def _quant(quant: str | None) -> str:
    from ..model.convert.quantize import check_quant

    return check_quant(quant or DEFAULT_QUANT)


def _is_checkpoint(files: list[HubFile]) -> bool:
    names = {f.filename for f in files}
    return "config.json" in names and any(n.endswith(".safetensors") for n in names)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip(".") or "model"


def _gguf_plan(file: HubFile, name: str) -> Plan:
    dest = models_dir() / file.repo.replace("/", "--") / file.filename
    partial = dest.with_name(dest.name + ".partial")
    have = partial.stat().st_size if partial.exists() else 0
    remaining = max(0, (file.size or 0) - have)
    plan = Plan(
        name=name,
        kind="gguf",
        quant=None,
        dest=dest,
        source=f"hf:{file.repo}/{file.filename}",
        download_bytes=remaining,
        peak_disk=remaining,
        result_bytes=file.size,
        files=[file],
        sha256=file.sha256,
        disk_needed=remaining,
    )
    plan.seconds["download"] = remaining / DOWNLOAD_RATE
    return plan


def _convert_plan_hub(repo: str, files: list[HubFile], quant: str, name: str | None) -> Plan:
    commit = files[0].revision if files else "main"
    repo_name = repo.split("/")[-1]
    wanted = _checkpoint_files(files)
    staging = models_dir() / ".staging" / f"{repo.replace('/', '--')}@{commit[:12]}"
    folder = staging / repo_name  # named after the repository: the GGUF's general.name comes from it
    dest = models_dir() / repo.replace("/", "--") / f"{repo_name}-{quant.upper()}.gguf"
    plan = _conversion_plan(name or f"{repo_name}:{quant}", quant, f"hf:{repo}@{commit}", folder, staging, dest, wanted)
    weights = sum(f.size or 0 for f in wanted if f.filename.endswith(".safetensors"))
    # Published checkpoints are bf16 (2 bytes a parameter); the estimate assumes so before config.json is read.
    _size_conversion(plan, weights, params=weights // 2, dtype="BF16")
    return plan


def _conversion_plan(
    name: str, quant: str, source: str, folder: Path, staging: Path, dest: Path, files: Sequence[HubFile] = ()
) -> Plan:
    """A conversion before it is sized (`_size_conversion`): the checkpoint in `folder` (`files`
    downloaded into it first) made into `dest`, its intermediate kept in `staging`."""
    return Plan(
        name=name, kind="convert", quant=quant, dest=dest, source=source, files=list(files), folder=folder, staging=staging
    )


def catalog_plan(name: str) -> Plan | None:
    """What getting a catalog model costs, from the catalog's own numbers, with no network: the
    conversion of its published weights, what a pull does when no GGUF build is found (the most it
    costs). None for a model the catalog gives no weights size for."""
    from .hub import HubFile

    entry, quant = catalog.require(name)
    if entry.weights_size is None:
        return None
    listing = [HubFile(entry.weights, "model.safetensors", entry.weights_size, None, "main")]
    return _convert_plan_hub(entry.weights, listing, quant, catalog.canonical(name))


def _checkpoint_files(files: list[HubFile]) -> list[HubFile]:
    """The files a conversion reads: metadata, and the shards the index names (or the one safetensors)."""
    names = {f.filename: f for f in files}
    out = [names[n] for n in METADATA_FILES if n in names]
    out += [f for n, f in sorted(names.items()) if n.endswith(".safetensors") and "/" not in n]
    return out


def _main_dtype(checkpoint: Checkpoint) -> str:
    counts: dict[str, int] = {}
    for t in checkpoint.tensors.values():
        counts[t.dtype] = counts.get(t.dtype, 0) + t.nbytes
    return max(counts, key=counts.__getitem__)


def intermediate_type(dtype: str, quant: str) -> str:
    """What the converter writes: the result itself for f16/bf16, else the checkpoint's own precision
    (bf16 stays bf16, a lossless copy; f32 is narrowed to f16, as llama.cpp's own recipe does)."""
    if quant in ("f16", "bf16"):
        return quant
    return "bf16" if dtype == "BF16" else "f16"


def _size_conversion(plan: Plan, weights: int, *, params: int, dtype: str) -> None:
    """Fills in the plan's sizes and times. What a stage already finished is neither counted nor timed.
    Downloaded shards are deleted once the intermediate is whole; a local folder is the user's and
    is neither counted nor touched."""
    from ..model.convert.quantize import BITS_PER_WEIGHT

    quant = plan.quant or DEFAULT_QUANT
    plan.outtype = intermediate_type(dtype, quant)
    header = 16 * 1024 * 1024  # metadata and vocabulary (a 152K-token vocabulary takes ~8 MB)
    intermediate = params * 2 + header
    quantizing = quant != plan.outtype
    result = int(params * BITS_PER_WEIGHT[quant] / 8) + header if quantizing else intermediate
    plan.result_bytes = result
    converted = _converted(plan)
    download = have = 0
    for f in plan.files:
        assert plan.folder is not None  # a convert plan's files are downloaded into its folder
        path = plan.folder / f.filename
        if converted:
            continue
        if path.exists():
            have += f.size or 0
            continue
        partial = path.with_name(path.name + ".partial")
        got = partial.stat().st_size if partial.exists() else 0
        have += got
        download += max(0, (f.size or 0) - got)
    if plan.files:
        plan.download_bytes = download
        plan.seconds["download"] = download / DOWNLOAD_RATE
    shards = sum(f.size or 0 for f in plan.files)
    written = intermediate if quantizing else result
    if quantizing:
        # The shards sit beside the intermediate until it is whole; then the intermediate beside the result.
        plan.peak_disk = max(shards + written, written + result)
    else:
        plan.peak_disk = shards + written
    if converted:
        plan.disk_needed = result if quantizing else 0
    else:
        plan.disk_needed = max(download + written, written + result - have) if quantizing else download + written
        plan.seconds["convert"] = CONVERT_FIXED + weights / CONVERT_RATE
    if quantizing:
        plan.seconds["quantize"] = params * 2 / (QUANTIZE_RATE_PER_CORE * (os.cpu_count() or 1))


def _converted(plan: Plan) -> bool:
    """Whether the convert stage is finished: its intermediate is whole. (A result it wrote directly
    is made again: only a stage whose output is then used is worth resuming from.)"""
    inter = _intermediate_path(plan, plan.outtype or "f16")
    return inter is not None and inter.exists()


def _intermediate_path(plan: Plan, outtype: str) -> Path | None:
    if plan.staging is None or plan.quant == outtype:
        return None
    # One name whatever its type: a resumed pull finds it even when the first run guessed the dtype.
    return plan.staging / f"{_safe(plan.folder.name if plan.folder else 'model')}-intermediate.gguf"


# -- doing ------------------------------------------------------------------------------------


def check_disk(plan: Plan) -> None:
    folder = plan.dest.parent
    while not folder.exists():
        folder = folder.parent
    from .hub import DISK_MARGIN

    free = shutil.disk_usage(folder).free
    if free < plan.disk_needed + DISK_MARGIN:
        from ..model.memory import format_bytes

        raise MemagentError(
            f"Not enough disk space: {plan.name} needs {format_bytes(plan.disk_needed + DISK_MARGIN)} "
            f"at its peak, {format_bytes(free)} is free in {folder}",
            "Free some space, or set MEMAGENT_HOME to a folder on a bigger disk",
        )


def execute(plan: Plan, *, progress: Progress | None = None, offline: bool = False) -> tuple[str, Record]:
    """Runs the plan's stages and registers the result; returns (name, registry record)."""
    from . import hub, registry

    stage = ["download"]  # the stage under way, for the message if the disk fills

    def report(name: str, done: int, total: int | None) -> None:
        stage[0] = name
        if progress is not None:
            progress(name, done, total)

    check_disk(plan)
    try:
        if plan.kind == "gguf":
            [file] = plan.files
            path = hub.download(file, plan.dest, progress=lambda d, t: report("download", d, t), offline=offline)
            return registry.add(path, plan.name, source=plan.source, sha256=file.sha256)
        assert plan.staging is not None and plan.folder is not None
        plan.staging.mkdir(parents=True, exist_ok=True)
        with _StagingLock(plan.staging):
            return _convert_stages(plan, plan.folder, plan.staging, report, offline)
    except OSError as exc:
        # The free-space check passed, but something else filled the disk meanwhile, or a quota
        # or file-size limit stopped a write. Partial files are kept (downloads resume from them;
        # a half-written GGUF is only ever a .partial): nothing is registered.
        if exc.errno not in DISK_FULL:
            raise
        raise MemagentError(
            f"The disk filled up during the {stage[0]} of {plan.name} ({exc.strerror})",
            f"Free space in {models_dir()} (the pull needs {format_bytes(plan.peak_disk)} at its peak) and run the "
            "same command again; finished stages are kept",
        ) from None


def _convert_stages(plan: Plan, folder: Path, staging: Path, report: Progress, offline: bool) -> tuple[str, Record]:
    """The stages of a convert plan; `folder` and `staging` are the plan's own (checked by `execute`)."""
    from ..model.convert import quantize, writer
    from ..model.convert.checkpoint import open_checkpoint
    from . import hub, registry

    outtype = plan.outtype or "f16"
    inter = _intermediate_path(plan, outtype)
    # Only a whole intermediate counts as a finished stage. An installed file from an earlier run is
    # made again: the checkpoint may have changed since.
    converted = inter is not None and inter.exists()
    missing = [f for f in plan.files if not (folder / f.filename).exists()]
    if missing and not converted:
        total = sum(f.size or 0 for f in missing)
        done = 0
        report("download", 0, total)
        for f in missing:
            base = done

            def file_progress(d: int, t: int | None, base: int = base) -> None:
                report("download", base + d, total)

            hub.download(f, folder / f.filename, offline=offline, progress=file_progress)
            done += f.size or 0
            report("download", done, total)
    if not converted:
        checkpoint = open_checkpoint(folder)
        outtype = intermediate_type(_main_dtype(checkpoint), plan.quant or DEFAULT_QUANT)
        inter = _intermediate_path(plan, outtype)
        target = inter if inter is not None else plan.dest
        report("convert", 0, None)  # the stage has begun (the vocabulary takes seconds before any tensor)
        writer.convert(checkpoint, target, outtype, progress=lambda d, t: report("convert", d, t))
        if plan.files and inter is not None:  # downloaded shards are not needed once the intermediate is whole
            for f in plan.files:
                if f.filename.endswith(".safetensors"):
                    (folder / f.filename).unlink(missing_ok=True)
    if inter is not None:
        assert plan.quant is not None  # the planners give every convert plan its quantization
        report("quantize", 0, None)
        quantize.quantize(inter, plan.dest, plan.quant, progress=lambda d, t: report("quantize", d, t))
    name, record = registry.add(plan.dest, plan.name, source=plan.source, sha256=None)
    shutil.rmtree(staging, ignore_errors=True)
    return name, record


class _StagingLock:
    """One pull per staging folder at a time: two writing the same intermediate would corrupt it."""

    def __init__(self, folder: Path):
        self.path = folder / ".lock"
        self.handle: BinaryIO | None = None

    def __enter__(self) -> _StagingLock:
        self.handle = open(self.path, "a+b")
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks
            return self
        try:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.handle.close()
            raise MemagentError(
                f"Another memagent is already working in {self.path.parent.name}", "Wait for it to finish"
            ) from None
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if self.handle is not None:
            self.handle.close()
        return False
