"""The catalog, the registry of installed models, settings, resolution and doctor."""

import json
import subprocess
import sys

import pytest
from helpers import REPO, run_memagent, words

from memagent_cli.errors import MemagentError
from memagent_cli.install import catalog, registry
from memagent_cli.install import config_file as settings


def memagent(*args, **kwargs):
    return run_memagent(*args, drop=("MEMAGENT_MODEL", "HF_HUB_OFFLINE"), **kwargs)


def test_catalog_ships_in_the_package_and_parses():
    entries = catalog.entries()
    assert set(entries) >= {"memagent-7b", "memagent-14b"}
    assert catalog.default_alias() == "memagent-7b:q4_k_m"
    seven = entries["memagent-7b"]
    assert seven.weights == "BytedTsinghua-SIA/RL-MemoryAgent-7B" and seven.candidates
    assert seven.size("q4_k_m") == 4_680_000_000 and entries["memagent-14b"].size("q8_0") == 15_700_000_000
    assert catalog.split_alias("MemAgent-14B:Q8_0") == ("memagent-14b", "q8_0")
    assert catalog.canonical("memagent-7b") == "memagent-7b:q4_k_m"
    assert catalog.lookup("nope") is None
    with pytest.raises(MemagentError, match="not in the catalog"):
        catalog.require("nope")


def test_catalog_is_in_an_installed_wheel(tmp_path):
    """Not only in a checkout: build the wheel and look inside."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    import zipfile

    (wheel,) = tmp_path.glob("memagent_cli-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "memagent_cli/model_catalog/catalog.toml" in names and "memagent_cli/model_catalog/README.md" in names
    # the page's templates, script and style ship too (memagent serve)
    assert {"memagent_cli/webapp/templates/run.html", "memagent_cli/webapp/static/page.js"} <= set(names)
    # Every module of every subpackage ships (pyproject lists the packages one by one).
    modules = {str(p.relative_to(REPO)) for p in (REPO / "memagent_cli").rglob("*.py")}
    assert modules - set(names) == set()


def test_add_info_path_rm_of_a_local_model(models, tmp_path):
    name, record = registry.add(models["random"], "tiny")
    assert name == "tiny" and record["architecture"] == "qwen2" and record["layers"] == 2
    assert record["quantization"] == "f32"  # testkit's tiny models are written in F32
    assert record["chat_template"] is True and record["size"] == models["random"].stat().st_size
    assert registry.get("tiny")["path"] == str(models["random"].resolve())
    assert registry.resolve_model("tiny") == models["random"].resolve()
    registry.remove("tiny")
    assert models["random"].exists()  # an added file is the user's: never deleted
    with pytest.raises(MemagentError, match="No installed model"):
        registry.get("tiny")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"not a model at all", "not a GGUF model file"),
        (b"GGUF\x03\x00\x00\x00" + b"\xff" * 40, "truncated or damaged"),
    ],
)
def test_add_refuses_what_is_not_a_gguf(tmp_path, content, message):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(MemagentError, match=message):
        registry.add(bad)
    assert registry.load() == {}


def test_add_refuses_a_vocabulary_only_gguf(qwen2_vocab):
    with pytest.raises(MemagentError, match="only a vocabulary"):
        registry.add(qwen2_vocab)


def test_resolution_order(models, monkeypatch):
    registry.add(models["random"], "configured")
    registry.add(models["long"], "from-env")
    # nothing given, nothing configured: the catalog default, which is not installed
    with pytest.raises(registry.NotInstalled, match="memagent models pull memagent-7b:q4_k_m"):
        registry.resolve_model(None)
    settings.set_setting("default_model", "configured")
    assert registry.resolve_model(None) == models["random"].resolve()
    monkeypatch.setenv("MEMAGENT_MODEL", "from-env")
    assert registry.resolve_model(None) == models["long"].resolve()
    assert registry.resolve_model(str(models["stop"])) == models["stop"]  # the flag wins
    with pytest.raises(MemagentError, match="Unknown model 'zzz'"):
        registry.resolve_model("zzz")
    with pytest.raises(MemagentError, match="Model file not found"):
        registry.resolve_model("missing.gguf")


def test_path_and_info_of_a_catalog_model_not_pulled_say_how_to_get_it(memagent_home):
    """A catalog name is not an unknown one: `path` and `info` say it is not installed and give the
    pull command; a name that is neither stays "no installed model"."""
    for sub in ("path", "info"):
        done = memagent("models", sub, "memagent-7b")
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert "memagent-7b:q4_k_m is not installed" in done.stderr
        assert "memagent models pull memagent-7b:q4_k_m" in done.stderr
        other = memagent("models", sub, "zzz")
        assert other.returncode == 2 and "No installed model is called 'zzz'" in other.stderr


def test_config_get_set_list(memagent_home):
    assert memagent("config", "set", "gpu_layers", "12").returncode == 0
    assert memagent("config", "get", "gpu_layers").stdout == "12\n"
    assert memagent("config", "set", "default_model", "memagent-14b").returncode == 0
    listed = json.loads(memagent("config", "list", "--json").stdout)
    assert listed["settings"] == {"gpu_layers": 12, "default_model": "memagent-14b"}
    assert listed["file"] == str(memagent_home / "config.toml")
    bad = memagent("config", "set", "colour", "blue")
    assert bad.returncode == 2 and "Unknown setting 'colour'" in bad.stderr
    assert memagent("config", "set", "gpu_layers", "lots").returncode == 2
    assert memagent("config", "set", "gpu_layers", "-1").returncode == 0  # every layer: a value, not an option
    assert memagent("config", "get", "gpu_layers").stdout == "-1\n"
    below = memagent("config", "set", "gpu_layers", "-2")  # below -1 means nothing
    assert below.returncode == 2 and "gpu_layers must be auto, -1 (all), 0 (none) or a number of layers" in below.stderr
    assert memagent("config", "set", "gpu_layers", "--unset").returncode == 0
    assert memagent("config", "get", "gpu_layers").stdout == ""


def test_a_count_from_1_refuses_0_and_words(memagent_home):
    """The setting threads and inspect --show-prompt's step (settings.whole_number): a usage error
    that names the value, before any document or model is read."""
    for value in ("0", "two"):
        threads = memagent("config", "set", "threads", value)
        assert threads.returncode == 2 and f"threads must be a whole number of at least 1, not '{value}'." in threads.stderr
        step = memagent("inspect", "missing.txt", "--question", "q", "--show-prompt", value)
        assert step.returncode == 2, step.stderr
        assert f"--show-prompt takes a step number from 1, or final; not '{value}'." in step.stderr
    assert memagent("config", "set", "threads", "3").returncode == 0
    assert memagent("config", "get", "threads").stdout == "3\n"


def test_without_a_terminal_a_missing_model_gives_the_pull_command(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(100), encoding="utf-8")
    proc = memagent("ask", doc, "q")
    assert proc.returncode == 2
    said = proc.stderr.strip()
    assert "\n" not in said and said.startswith(
        "error: The model memagent-7b:q4_k_m is not installed. Get it with: memagent models pull memagent-7b:q4_k_m "
        "(downloads 14.2 GiB; converts and quantizes to q4_k_m (~4.4 GiB); needs 28.4 GiB of free disk at its peak; takes about "
    )
    assert said.endswith(", at most). Or use a GGUF file you have: --model FILE.gguf")


def test_models_list_shows_installed_and_catalog(models):
    registry.add(models["random"], "tiny")
    out = json.loads(memagent("models", "list", "--json").stdout)
    assert [m["name"] for m in out["installed"]] == ["tiny"]
    aliases = [m["alias"] for m in out["catalog"]]
    assert "memagent-7b:q4_k_m" in aliases and "memagent-14b:q8_0" in aliases
    assert out["default"] == "memagent-7b:q4_k_m"
    text = memagent("models", "list").stdout
    assert "tiny" in text and "memagent-7b:q4_k_m (default)" in text
    assert memagent("models", "path", "tiny").stdout.strip() == str(models["random"].resolve())
    info = json.loads(memagent("models", "info", "tiny", "--json").stdout)
    assert info["architecture"] == "qwen2" and info["name"] == "tiny"


def test_models_add_on_the_command_line(models, tmp_path):
    ok = memagent("models", "add", models["random"], "--name", "mine")
    assert ok.returncode == 0 and "added mine: qwen2, 2 layers" in ok.stderr
    bad = tmp_path / "x.gguf"
    bad.write_text("hello", encoding="utf-8")
    refused = memagent("models", "add", bad)
    assert refused.returncode == 1 and "not a GGUF model file" in refused.stderr and "Traceback" not in refused.stderr


def test_doctor_on_this_cpu_only_build(models):
    registry.add(models["random"], "tiny")
    out = json.loads(memagent("doctor", "--json").stdout)
    assert out["gpu"]["offload_supported"] is False and out["gpu"]["reinstall"]
    assert "CPU" in out["backends"] and out["python"].startswith("3.")
    assert out["paths"]["models"].endswith("models") and out["paths"]["traces"].endswith("traces.db")
    (model,) = out["models"]
    assert model["name"] == "tiny" and model["architecture"] == "qwen2"
    text = " ".join(memagent("doctor").stdout.split())  # the terminal's width wraps the command
    assert "reinstall llama-cpp-python with a GPU backend:" in text and out["gpu"]["reinstall"] in text
