"""memagent_cli.install.hub against a fake Hub (tests/fakehub.py): a real HTTP server on 127.0.0.1 that
huggingface_hub's own client talks to, so listing, downloads, resume and errors go through the
real protocol. No test reaches the network or the user's ~/.cache (guarded below).

HF_ENDPOINT: huggingface_hub.constants reads it once, at import, into ENDPOINT and into the URL
template hf_hub_url() formats (HUGGINGFACE_CO_URL_TEMPLATE). The `hub` fixture patches both;
HfApi() reads constants.ENDPOINT when constructed, so hub.py (which builds one per call) follows.
The token file path and offline flag are import-time constants too, and are patched likewise.
"""

from __future__ import annotations

import hashlib
import socket

import pytest
from fakehub import FakeHub

from memagent_cli.errors import EXIT_USAGE, MemagentError
from memagent_cli.install import hub as hubmod
from memagent_cli.install.hub import HubFile, download, list_gguf_files, pick_file, quant_of, resolve_spec
from testkit.tinymodel import write_tiny_qwen2

REPO = "owner/tiny-GGUF"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture(scope="session")
def ggufs(tmp_path_factory) -> dict[str, bytes]:
    """The repo's files: two quantization-named copies with different bytes, a split part, a README."""
    out = tmp_path_factory.mktemp("hubmodels")
    q4 = write_tiny_qwen2(out / "a.gguf", seed=0).read_bytes()
    q8 = write_tiny_qwen2(out / "b.gguf", seed=1).read_bytes()
    assert q4 != q8
    return {
        "tiny-Q4_K_M.gguf": q4,
        "tiny-Q8_0.gguf": q8 + b"\0" * 1000,  # a bigger file, so "smallest" means something
        "tiny-F16-00001-of-00002.gguf": q4[:1000],
        "README.md": b"# tiny\n",
    }


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any connection or name lookup beyond this machine fails the test."""
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOOPBACK:
            raise AssertionError(f"test tried to reach {address}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in _LOOPBACK and host is not None:
            raise AssertionError(f"test tried to look up {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def point_at(monkeypatch, endpoint: str) -> None:
    """What setting HF_ENDPOINT before importing huggingface_hub would have done."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")


@pytest.fixture
def hub(monkeypatch, tmp_path, ggufs):
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))  # never the user's login
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    with FakeHub() as fake:
        fake.add_repo(REPO, ggufs)
        fake.add_repo("owner/gated-GGUF", {"gated-Q4_K_M.gguf": ggufs["tiny-Q4_K_M.gguf"]}, gated=True)
        point_at(monkeypatch, fake.url)
        yield fake


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gets(fake: FakeHub) -> list[tuple[str, str, str | None]]:
    return [r for r in fake.requests if r[0] == "GET" and "/api/" not in r[1]]


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# -- spec and quantization tables ------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("hf:a/b", ("a/b", None, None)),
        ("hf:a/b:Q8_0", ("a/b", "q8_0", None)),
        ("hf:bartowski/Qwen2.5-7B-Instruct-GGUF:q4_k_m", ("bartowski/Qwen2.5-7B-Instruct-GGUF", "q4_k_m", None)),
        ("hf:a/b/x.gguf", ("a/b", None, "x.gguf")),
        ("hf:a/b/sub/x.GGUF", ("a/b", None, "sub/x.GGUF")),
        ("HF:a/b", ("a/b", None, None)),
    ],
)
def test_resolve_spec(spec, expected):
    assert resolve_spec(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "a/b",
        "hf:",
        "hf:a",
        "hf:a/",
        "hf:/b",
        "hf:a/b:",
        "hf:a/b:Q4 K",
        "hf:a/b/x.bin",
        "hf:a/b/x.gguf:Q4_0",
        "hf:a/b/../x.gguf",
        "hf:a/b//x.gguf",
        "hf:a..c/b",
        "hf:-a/b",
        "hf:a/b c",
    ],
)
def test_resolve_spec_rejects(spec):
    with pytest.raises(MemagentError) as caught:
        resolve_spec(spec)
    assert caught.value.exit_code == EXIT_USAGE
    assert "hf:OWNER/REPO:QUANT" in caught.value.hint and "FILE.gguf" in caught.value.hint


@pytest.mark.parametrize(
    "name, quant",
    [
        ("x-Q4_K_M.gguf", "q4_k_m"),
        ("x.q8_0.gguf", "q8_0"),
        ("x-f16.gguf", "f16"),
        ("x-IQ4_XS.gguf", "iq4_xs"),
        ("x-BF16.gguf", "bf16"),
        ("Qwen2.5-7B-Instruct-Q5_K_S.gguf", "q5_k_s"),
        ("sub/RL-MemoryAgent-7B-Q4_K_M.gguf", "q4_k_m"),
        ("x-UD-Q4_K_XL.gguf", "q4_k_xl"),
        ("x-IQ2_XXS.gguf", "iq2_xxs"),
        ("x-Q4_0_4_4.gguf", "q4_0_4_4"),
        ("x-F16-00001-of-00002.gguf", "f16"),
        ("x.gguf", None),
        ("Qwen2-7B.gguf", None),
        ("model-7B-instruct.gguf", None),
    ],
)
def test_quant_of(name, quant):
    assert quant_of(name) == quant


# -- listing and picking ------------------------------------------------------------------------


def test_list_gguf_files_reports_sizes_and_lfs_sha256(hub, ggufs):
    files = list_gguf_files(REPO)
    assert [f.filename for f in files] == sorted(n for n in ggufs if n.endswith(".gguf"))  # no README
    for f in files:
        assert f.repo == REPO
        assert f.size == len(ggufs[f.filename])
        assert f.sha256 == sha(ggufs[f.filename])
        assert f.revision == hub.commit(REPO)  # pinned to the commit, not "main"
    assert ("GET", f"/api/models/{REPO}/revision/main", None) in hub.requests


def test_pick_file_by_quantization(hub):
    files = list_gguf_files(REPO)
    assert pick_file(files, None).filename == "tiny-Q4_K_M.gguf"
    assert pick_file(files, "q8_0").filename == "tiny-Q8_0.gguf"
    assert pick_file(files, "Q8_0").filename == "tiny-Q8_0.gguf"
    without_q4 = [f for f in files if "Q4_K_M" not in f.filename]
    # no Q4_K_M: the smallest single file, never the (smaller) split part
    assert pick_file(without_q4, None).filename == "tiny-Q8_0.gguf"


def test_pick_file_unknown_or_split_quantization_lists_available(hub):
    files = list_gguf_files(REPO)
    with pytest.raises(MemagentError) as caught:
        pick_file(files, "q2_k")
    assert "Q2_K" in caught.value.message
    assert "Q4_K_M, Q8_0" in caught.value.hint  # sorted; F16 only exists split
    with pytest.raises(MemagentError) as caught:
        pick_file(files, "f16")
    assert "split" in caught.value.message
    only_split = [f for f in files if "00001-of" in f.filename]
    with pytest.raises(MemagentError, match="only split"):
        pick_file(only_split, None)


def test_pick_file_skips_projectors_and_refuses_ambiguity():
    def hf(name, size=10):
        return HubFile("a/b", name, size, None, "c" * 40)

    assert pick_file([hf("mmproj-x-f16.gguf"), hf("x-F16.gguf", 99)], "f16").filename == "x-F16.gguf"
    with pytest.raises(MemagentError, match="several Q8_0") as caught:
        pick_file([hf("x-Q8_0.gguf"), hf("sub/x-Q8_0.gguf")], "q8_0")
    assert "hf:a/b/FILE.gguf" in caught.value.hint
    with pytest.raises(MemagentError, match="no GGUF"):
        pick_file([], None)


def test_missing_repo(hub):
    with pytest.raises(MemagentError, match="No repository owner/nothing-GGUF on the Hub"):
        list_gguf_files("owner/nothing-GGUF")


def test_unreachable_hub(hub, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    point_at(monkeypatch, f"http://127.0.0.1:{port}")
    with pytest.raises(MemagentError, match="could not be reached") as caught:
        list_gguf_files(REPO)
    assert "--offline" in caught.value.hint


# -- downloads ------------------------------------------------------------------------------------


def test_download_lands_at_dest_with_progress(hub, ggufs, tmp_path):
    file = pick_file(list_gguf_files(REPO), "q8_0")
    dest = tmp_path / "models" / "new" / "tiny.gguf"  # folders created as needed
    calls = []
    assert download(file, dest, progress=lambda done, total: calls.append((done, total))) == dest
    assert dest.read_bytes() == ggufs["tiny-Q8_0.gguf"]
    assert leftovers(dest.parent) == ["tiny.gguf"]  # no partial left behind
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and len(done) > 2  # strictly increasing as bytes arrive
    assert calls[-1] == (file.size, file.size)
    # the resolve URL pinned at the listed commit, redirected to the "CDN" as LFS files are
    assert ("GET", f"/{REPO}/resolve/{file.revision}/tiny-Q8_0.gguf", None) in hub.requests
    assert ("GET", f"/cdn/{file.sha256}", None) in hub.requests


def test_cut_off_download_resumes_with_range(hub, ggufs, tmp_path):
    file = pick_file(list_gguf_files(REPO), None)
    dest = tmp_path / "tiny.gguf"
    partial = tmp_path / "tiny.gguf.partial"
    hub.cut_after = 200_000
    with pytest.raises(MemagentError, match="interrupted") as caught:
        download(file, dest)
    assert "again" in caught.value.hint
    assert not dest.exists()
    assert partial.read_bytes() == ggufs["tiny-Q4_K_M.gguf"][:200_000]

    hub.requests.clear()
    download(file, dest)
    assert dest.read_bytes() == ggufs["tiny-Q4_K_M.gguf"]
    assert not partial.exists()
    assert [r[2] for r in gets(hub)] == ["bytes=200000-", "bytes=200000-"]  # resolve, then CDN: only the rest


def test_complete_partial_is_verified_not_fetched(hub, ggufs, tmp_path):
    file = pick_file(list_gguf_files(REPO), None)
    dest = tmp_path / "tiny.gguf"
    (tmp_path / "tiny.gguf.partial").write_bytes(ggufs["tiny-Q4_K_M.gguf"])  # e.g. killed before the rename
    hub.requests.clear()
    download(file, dest)
    assert dest.read_bytes() == ggufs["tiny-Q4_K_M.gguf"]
    assert gets(hub) == []


def test_resume_when_the_server_ignores_range(hub, ggufs, tmp_path):
    file = pick_file(list_gguf_files(REPO), None)
    dest = tmp_path / "tiny.gguf"
    (tmp_path / "tiny.gguf.partial").write_bytes(ggufs["tiny-Q4_K_M.gguf"][:1000])
    hub.ignore_range = True  # a 200 with the whole file: the partial must start over, not be appended to
    download(file, dest)
    assert dest.read_bytes() == ggufs["tiny-Q4_K_M.gguf"]
    assert gets(hub)[-1][2] == "bytes=1000-"


def test_one_pull_per_file_at_a_time(hub, tmp_path):
    fcntl = pytest.importorskip("fcntl")
    file = pick_file(list_gguf_files(REPO), None)
    with open(tmp_path / "tiny.gguf.partial", "ab") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)  # another process pulling the same file
        hub.requests.clear()
        with pytest.raises(MemagentError, match="Another pull"):
            download(file, tmp_path / "tiny.gguf")
    assert hub.requests == []
    assert not (tmp_path / "tiny.gguf").exists()


def test_checksum_mismatch_leaves_nothing(hub, tmp_path):
    hub.wrong_sha = True
    file = pick_file(list_gguf_files(REPO), None)
    dest = tmp_path / "tiny.gguf"
    with pytest.raises(MemagentError, match="checksum mismatch"):
        download(file, dest)
    assert leftovers(tmp_path) == []  # no dest, no partial
    assert gets(hub)  # it did download before refusing


def test_gated_repo_needs_a_token(hub, ggufs, tmp_path, monkeypatch):
    [file] = list_gguf_files("owner/gated-GGUF")  # the listing is public, as on the Hub
    with pytest.raises(MemagentError, match="gated") as caught:
        download(file, tmp_path / "g.gguf")
    assert "hf auth login" in caught.value.hint and "HF_TOKEN" in caught.value.hint
    assert leftovers(tmp_path) == []

    monkeypatch.setenv("HF_TOKEN", hub.token)  # sent as huggingface_hub sends it: Authorization: Bearer
    download(file, tmp_path / "g.gguf")
    assert (tmp_path / "g.gguf").read_bytes() == ggufs["tiny-Q4_K_M.gguf"]


def test_missing_file(hub, tmp_path):
    file = HubFile(REPO, "tiny-Q2_K.gguf", 10, None, hub.commit(REPO))
    with pytest.raises(MemagentError, match="no file 'tiny-Q2_K.gguf'"):
        download(file, tmp_path / "x.gguf")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("how", ["argument", "env"])
def test_offline_refuses(hub, tmp_path, monkeypatch, how):
    file = HubFile(REPO, "tiny-Q4_K_M.gguf", 10, None, hub.commit(REPO))
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MemagentError, match="Downloads are off") as caught:
        download(file, tmp_path / "x.gguf", offline=how == "argument")
    assert ("HF_HUB_OFFLINE" in caught.value.hint) and ("--offline" in caught.value.hint)
    assert hub.requests == []


def test_plain_http_endpoint_refused(hub, tmp_path, monkeypatch):
    point_at(monkeypatch, "http://hub.example.com")
    file = HubFile(REPO, "tiny-Q4_K_M.gguf", 10, None, "c" * 40)
    with pytest.raises(MemagentError, match="Refusing to download over http") as caught:
        download(file, tmp_path / "x.gguf")
    assert "https" in caught.value.hint
    with pytest.raises(MemagentError, match="Refusing"):
        list_gguf_files(REPO)
    assert leftovers(tmp_path) == []


def test_disk_space_checked_before_any_get(hub, ggufs, tmp_path, monkeypatch):
    file = pick_file(list_gguf_files(REPO), None)
    hub.requests.clear()
    real = hubmod.shutil.disk_usage

    def little(path):
        usage = real(path)
        return usage._replace(free=file.size + hubmod.DISK_MARGIN - 1)

    monkeypatch.setattr(hubmod.shutil, "disk_usage", little)
    with pytest.raises(MemagentError, match="Not enough disk space") as caught:
        download(file, tmp_path / "tiny.gguf")
    assert "free" in caught.value.message
    assert hub.requests == []
    assert leftovers(tmp_path) == []
    # with a partial already there, only the rest has to fit
    (tmp_path / "tiny.gguf.partial").write_bytes(ggufs["tiny-Q4_K_M.gguf"][:100_000])
    monkeypatch.setattr(hubmod.shutil, "disk_usage", lambda p: real(p)._replace(free=file.size - 100_000 + hubmod.DISK_MARGIN))
    download(file, tmp_path / "tiny.gguf")
    assert (tmp_path / "tiny.gguf").read_bytes() == ggufs["tiny-Q4_K_M.gguf"]


# -- the fake speaks the real protocol -----------------------------------------------------------


def test_fake_hub_serves_huggingface_hub_itself(hub, ggufs, tmp_path):
    """hf_hub_download (HEAD, redirect, GET) and list_repo_tree work against the fake unchanged."""
    from huggingface_hub import HfApi, hf_hub_download

    path = hf_hub_download(REPO, "tiny-Q8_0.gguf", cache_dir=tmp_path / "cache")
    assert open(path, "rb").read() == ggufs["tiny-Q8_0.gguf"]
    assert any(r[0] == "HEAD" for r in hub.requests)
    tree = {f.path: f for f in HfApi().list_repo_tree(REPO, recursive=True, expand=True)}
    assert tree["tiny-Q8_0.gguf"].lfs.sha256 == sha(ggufs["tiny-Q8_0.gguf"])
    assert tree["README.md"].lfs is None
