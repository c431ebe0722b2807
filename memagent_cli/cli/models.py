"""`memagent models ...`, `memagent config ...` and `memagent doctor`: getting a model and
checking the machine. Thin: the work is in install/ (registry.py, hub.py, pulling.py, config_file.py,
doctor.py) and model/gpu.py."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..errors import EXIT_USAGE, MemagentError
from ..install import catalog, config_file, registry
from ..model.convert.quantize import DEFAULT_QUANT, QUANTS
from .common import command_group, run_guard
from .model_choice import offline_requested, run_plan, size_text
from .options import JsonOpt, OfflineOpt
from .textout import SafeConsole, print_json, visible

if TYPE_CHECKING:
    from ..install.pulling import Plan

models_app = command_group("Install and inspect models: the catalog, pull, add, rm, path, info.")
config_app = command_group("Read and change settings (config.toml).")

NameArg = Annotated[str, typer.Argument(help="An installed model's name (see memagent models list).")]


QuantOpt = Annotated[
    Optional[str],
    typer.Option(
        "--quant",
        "-Q",
        metavar="Q",
        help=f"Quantization: {DEFAULT_QUANT} (default), {', '.join(QUANTS[1:-1])} or {QUANTS[-1]}.",
        show_default=False,
    ),
]
NameOpt = Annotated[
    Optional[str],
    typer.Option(
        help="The name to use with --model. Default: the repository or folder name plus the quantization.", show_default=False
    ),
]


def install(plan: Plan, *, offline: bool, err: Console, json_out: bool = False) -> tuple[str, registry.Record]:
    """Says what a pull or conversion plan costs, carries it out, and prints the record with --json."""
    err.print(f"{visible(plan.name)}: {plan.describe()}", markup=False, highlight=False, soft_wrap=True)
    name, record = run_plan(plan, offline=offline, err=err)
    if json_out:
        print_json({"name": name, **record})
    return name, record


@models_app.command("list")
@run_guard
def list_models(json_out: JsonOpt = False) -> None:
    """Installed models and the catalog; the default is marked."""
    installed = registry.load()
    default = config_file.get_setting("default_model") or catalog.default_alias()
    cat = catalog.entries()
    if json_out:
        print_json(
            {
                "default": default,
                "installed": [{"name": n, **r} for n, r in sorted(installed.items())],
                "catalog": [
                    {
                        "alias": f"{a}:{q}",
                        "size": e.size(q),
                        "base_model": e.base_model,
                        "license": e.license,
                        "candidates": list(e.candidates),
                        "installed": f"{a}:{q}" in installed,
                    }
                    for a, e in sorted(cat.items())
                    for q in e.quantizations
                ],
            }
        )
        return
    out = SafeConsole(highlight=False)
    table = Table(title="installed", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("name", "size", "quantization", "path"):
        table.add_column(col, overflow="fold")
    for name, r in sorted(installed.items()):
        mark = " (default)" if name in (default, catalog.canonical(default)) else ""
        table.add_row(name + mark, size_text(r.get("size")), r.get("quantization") or "", r["path"])
    out.print(table if installed else Text("No models installed yet.", style="dim"))
    table = Table(title="catalog", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("alias", "size", "base", "installed"):
        table.add_column(col)
    for alias, e in sorted(cat.items()):
        for q in e.quantizations:
            name = f"{alias}:{q}"
            mark = " (default)" if name == catalog.canonical(default) else ""
            table.add_row(name + mark, size_text(e.size(q)), e.base_model, "yes" if name in installed else "")
    out.print(table)


@models_app.command()
@run_guard
def pull(
    spec: Annotated[
        str,
        typer.Argument(
            metavar="ALIAS|hf:OWNER/REPO[:QUANT|/FILE.gguf]",
            help="A catalog alias (memagent-7b, memagent-14b:q8_0), or a Hub repository "
            "of GGUF files or of safetensors (converted here).",
        ),
    ],
    quant: QuantOpt = None,
    name: Annotated[
        Optional[str],
        typer.Option(
            help="The name to use with --model. Default: the alias with its quantization, the hf: spec, or for a "
            "converted repository its name plus the quantization.",
            show_default=False,
        ),
    ] = None,
    offline: OfflineOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Download a model. A GGUF build is taken when the Hub has one; otherwise the published safetensors
    are downloaded and converted here (memagent models convert). Says the download size, peak disk and
    time first; checks free space; resumes an interrupted pull at the stage it was in; verifies checksums."""
    from ..install import pulling

    offline = offline_requested(offline)
    plan = pulling.plan_pull(spec, quant=quant, name=name, offline=offline)
    install(plan, offline=offline, err=SafeConsole(stderr=True, highlight=False), json_out=json_out)


@models_app.command()
@run_guard
def convert(
    source: Annotated[
        str,
        typer.Argument(
            metavar="FOLDER|hf:OWNER/REPO[@REVISION]",
            help="A Hugging Face checkpoint folder (config.json, tokenizer files, "
            "*.safetensors) or a Hub repository holding one.",
        ),
    ],
    quant: QuantOpt = None,
    name: NameOpt = None,
    offline: OfflineOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Make a GGUF model from safetensors and install it: qwen2 (every MemAgent model), qwen3 and
    qwen3moe (Qwen3-30B-A3B, QwenLong-L1.5-30B-A3B).

    Needs nothing but memagent: the GGUF is written with llama.cpp's gguf package and quantized with
    llama.cpp's quantizer inside llama-cpp-python. Then use it with: memagent ask --model NAME."""
    from ..install import pulling

    offline = offline_requested(offline)
    plan = pulling.plan_convert(source, quant=quant or DEFAULT_QUANT, name=name, offline=offline)
    install(plan, offline=offline, err=SafeConsole(stderr=True, highlight=False), json_out=json_out)


@models_app.command()
@run_guard
def add(
    path: Annotated[str, typer.Argument(help="A GGUF file on this machine (it stays where it is).")],
    name: Annotated[
        Optional[str], typer.Option(help="The name to use with --model. Default: the file name.", show_default=False)
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Register a local GGUF after checking it is one (architecture, size, quantization, template)."""
    name, record = registry.add(path, name)
    if json_out:
        print_json({"name": name, **record})
        return
    SafeConsole(stderr=True, highlight=False).print(
        f"added {name}: {record['architecture']}, {record['layers']} layers, {record['quantization'] or '?'}, "
        f"{size_text(record['size'])}, context {record['context_length']}, "
        f"{'with' if record['chat_template'] else 'without'} a chat template",
        markup=False,
    )


@models_app.command()
@run_guard
def rm(name: NameArg) -> None:
    """Forget a model (a file memagent downloaded is deleted; one you added is kept)."""
    record = registry.remove(name)
    kept = " (the file is kept)" if record and record["source"] == "local" else ""
    SafeConsole(stderr=True).print(f"removed {name}{kept}", markup=False)


@models_app.command()
@run_guard
def path(name: NameArg) -> None:
    """Print the model's file path (for scripts)."""
    print(registry.get(name)["path"])


@models_app.command()
@run_guard
def info(name: NameArg, json_out: JsonOpt = False) -> None:
    """What an installed model is: architecture, size, quantization, context, where it came from."""
    record = registry.get(name)
    if json_out:
        print_json(record)
        return
    out = SafeConsole(highlight=False)
    for key, value in record.items():
        out.print(Text.assemble((f"{key:15}", "bold"), str(value)))


@config_app.command("get")
@run_guard
def config_get(key: Annotated[str, typer.Argument(help=f"One of: {', '.join(config_file.KEYS)}.")]) -> None:
    """Print one setting (nothing if unset)."""
    config_file.check_key(key)
    value = config_file.get_setting(key)
    if value is not None:
        print(value)


# A value may start with "-" (gpu_layers -1): taken as the value, not as an unknown option.
@config_app.command("set", context_settings={"ignore_unknown_options": True})
@run_guard
def config_set(
    key: Annotated[str, typer.Argument(help=f"One of: {', '.join(config_file.KEYS)}.")],
    value: Annotated[Optional[str], typer.Argument(help="The value; leave out with --unset.", show_default=False)] = None,
    unset: Annotated[bool, typer.Option("--unset", help="Remove the setting.")] = False,
) -> None:
    """Change a setting, e.g. memagent config set default_model memagent-14b."""
    if (value is None) != unset:
        raise MemagentError("Give a value, or --unset (one of the two).", exit_code=EXIT_USAGE)
    config_file.set_setting(key, None if unset else value)


@config_app.command("list")
@run_guard
def config_list(json_out: JsonOpt = False) -> None:
    """Every setting with its value and meaning, and where the file is."""
    data = config_file.load()
    if json_out:
        print_json({"file": str(config_file.config_file()), "settings": data})
        return
    out = SafeConsole(highlight=False)
    out.print(Text(f"# {config_file.config_file()}", style="dim"))
    for key, (_, meaning) in config_file.KEYS.items():
        value = data.get(key)
        shown = repr(value) if value is not None else "(unset)"
        out.print(Text.assemble((f"{key} = ", "bold"), shown, (f"  # {meaning}", "dim")))


def doctor(
    ctx: Annotated[
        Optional[int],
        typer.Option(
            "--ctx",
            help="Context size to check the fit for. Default: each model's own, as its protocol's runs make it"
            " (about 8K tokens for memagent, 80K for qwenlong).",
            min=256,
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check this machine: versions, compiled backends, GPU offload, paths, installed models and whether
    they fit in GPU memory; with the exact reinstall command when offload is unsupported."""
    from ..install import doctor as diagnosis
    from ..paths import default_home, traces_db
    from .views.reports import render_doctor

    try:
        installed = registry.load()
    except MemagentError:
        installed = {}
    models = [(n, Path(r["path"])) for n, r in sorted(installed.items())]
    contexts: dict[str, int] = {}
    if ctx is None:
        from ..core.jobs import run_context

        for name, path in models:
            with contextlib.suppress(MemagentError):  # a broken model is reported by diagnose
                contexts[name] = run_context(str(path))[1]
    report = diagnosis.diagnose(models=models, n_ctx=ctx, contexts=contexts)
    import platformdirs

    report["paths"] = {
        "data": str(default_home()),
        "models": str(registry.models_dir()),
        "traces": str(traces_db()),
        "config": str(config_file.config_file()),
        "cache": platformdirs.user_cache_dir("memagent"),
    }
    if json_out:
        print_json(report)
        return
    SafeConsole(highlight=False).print(render_doctor(report))
