"""A fake Hugging Face Hub: a real HTTP server on 127.0.0.1 that speaks the part of the Hub
protocol huggingface_hub (2.4.0) and memagent_cli.install.hub use, so tests exercise the real client code
over a real socket with nothing mocked inside huggingface_hub.

What it serves, modelled on what huggingface.co answers (read off huggingface_hub's
hf_api.py, file_download.py and utils/_http.py):

- GET /api/models/{repo}[/revision/{rev}][?blobs=true]: model info JSON (`HfApi.model_info`), with
  `sha` (the commit) and `siblings` [{rfilename, blobId, size, lfs: {sha256, size, pointerSize}}].
  A gated repo answers 200 here, as the real Hub does: only its files are gated.
- GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=&expand=: tree listing JSON
  (`HfApi.list_repo_tree`), files as {type: "file", oid, size, path, lfs: {oid, size, pointerSize}}.
- HEAD/GET /{repo}/resolve/{rev}/{filename}: an LFS file answers 302 to a "CDN" URL (`cdn_url`/cdn/{sha256},
  a second server on another port: another origin, as the real CDN is, so huggingface_hub takes the
  metadata from the 302 itself and httpx drops the Authorization header when following it) with
  X-Repo-Commit, X-Linked-Etag (the quoted LFS sha256), X-Linked-Size and ETag; a non-LFS file
  (README.md, *.json, ...) is served directly with its git blob id as ETag.
  /cdn/{sha256} serves the bytes with Content-Length, Accept-Ranges and ETag, and honours
  `Range: bytes=START-[END]` with 206 Partial Content (416 when START is past the end).
- Errors as the Hub sends them: unknown repo -> 401 (no Authorization header) or 404 (with one),
  X-Error-Code: RepoNotFound; unknown file -> 404 EntryNotFound (with X-Repo-Commit); unknown
  revision -> 404 RevisionNotFound; a file of a gated repo without the right token -> 401 GatedRepo.

Knobs for tests: `cut_after` (drop the connection after that many body bytes of the next file
GET longer than that, once), `wrong_sha` (advertise an sha256 that does not match the content), `ignore_range`
(answer a Range request with the whole file and 200, as some proxies do), `token` (the
bearer token that opens gated repos) and `requests`, a log of (method, path, Range header).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

# Files the Hub keeps in plain git rather than LFS (the rest, GGUFs above all, are LFS/Xet).
_GIT_SUFFIXES = (".md", ".json", ".txt", ".gitattributes", ".py", ".yaml", ".yml")
_DATE = "2025-01-01T00:00:00.000Z"


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob, the ETag the Hub gives a non-LFS file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Repo:
    def __init__(self, name: str, files: dict[str, bytes], gated: bool):
        self.name = name
        self.files = dict(files)
        self.gated = gated
        digest = hashlib.sha1(name.encode())
        for filename in sorted(files):
            digest.update(filename.encode() + b"\0" + hashlib.sha256(files[filename]).digest())
        self.commit = digest.hexdigest()

    def is_lfs(self, filename: str) -> bool:
        return not filename.lower().endswith(_GIT_SUFFIXES)


class FakeHub:
    """Serves repositories {repo: {filename: bytes}} over HTTP on 127.0.0.1 (port chosen by the OS).

    Use as a context manager, or call start() and stop(). `url` is what HF_ENDPOINT should be.
    """

    def __init__(self, *, token: str = "hf_fake_token"):
        self.token = token
        self.cut_after: int | None = None
        self.wrong_sha = False
        self.ignore_range = False
        self.requests: list[tuple[str, str, str | None]] = []
        self._repos: dict[str, _Repo] = {}
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # -- setup ---------------------------------------------------------------------------

    def add_repo(self, repo: str, files: dict[str, bytes], gated: bool = False) -> None:
        self._repos[repo] = _Repo(repo, files, gated)

    def commit(self, repo: str) -> str:
        return self._repos[repo].commit

    def sha256(self, repo: str, filename: str) -> str:
        """The sha256 the Hub advertises for a file (a wrong one when `wrong_sha` is set)."""
        data = self._repos[repo].files[filename]
        real = hashlib.sha256(data).hexdigest()
        return hashlib.sha256(b"not the content" + data).hexdigest() if self.wrong_sha else real

    @property
    def url(self) -> str:
        """The Hub's address: what HF_ENDPOINT should be."""
        return self._address("hub")

    @property
    def cdn_url(self) -> str:
        """Where LFS files are redirected to."""
        return self._address("cdn")

    def _address(self, role: str) -> str:
        if role not in self._servers:
            raise RuntimeError("FakeHub is not started")
        host, port = self._servers[role].server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        for role in ("hub", "cdn"):
            handler = type("Handler", (_Handler,), {"hub": self, "role": role})
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, args=(0.02,), name=f"fakehub-{role}", daemon=True)
            thread.start()
            self._servers[role] = server
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        self._servers.clear()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers for the handler -----------------------------------------------------------

    def _take_cut(self, length: int) -> int | None:
        """The cut-off for a GET of `length` body bytes, consumed when it applies: a cut happens once,
        in the first body long enough to be cut (small files before it pass whole)."""
        with self._lock:
            if self.cut_after is None or self.cut_after >= length:
                return None
            cut, self.cut_after = self.cut_after, None
            return cut

    def _find_repo(self, parts: list[str]) -> tuple[_Repo | None, list[str]]:
        """Splits ["owner", "name", ...rest] into the repo and the rest."""
        if len(parts) < 2:
            return None, parts
        return self._repos.get(f"{parts[0]}/{parts[1]}"), parts[2:]


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    role: str  # "hub" (API and resolve) or "cdn" (LFS bytes)
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub; every answer carries Content-Length

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr log
        pass

    # -- plumbing --------------------------------------------------------------------------

    def do_GET(self):
        self._dispatch(head=False)

    def do_HEAD(self):
        self._dispatch(head=True)

    def _dispatch(self, head: bool) -> None:
        split = urlsplit(self.path)
        path = unquote(split.path)
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        parts = [p for p in path.split("/") if p]
        if self.role == "cdn":
            if parts[:1] == ["cdn"] and len(parts) == 2:
                self._cdn(parts[1], head)
            else:
                self._send(404, b"Not Found", head=head)
        elif parts[:2] == ["api", "models"]:
            self._api(parts[2:], query, head)
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(parts, head)
        else:
            self._send(404, b"Not Found", head=head)

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, data, head: bool) -> None:
        self._send(200, json.dumps(data).encode(), head=head, content_type="application/json; charset=utf-8")

    def _error(self, status: int, code: str, message: str, head: bool, extra: dict[str, str] | None = None) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": message, **(extra or {})}
        self._send(
            status, json.dumps({"error": message}).encode(), headers, head=head, content_type="application/json; charset=utf-8"
        )

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {self.hub.token}"

    def _repo_not_found(self, head: bool) -> None:
        # The Hub cannot tell "missing" from "private": 401 to anonymous callers, 404 to logged-in ones.
        status = 404 if self.headers.get("Authorization") else 401
        self._error(status, "RepoNotFound", "Repository not found", head)

    def _revision_ok(self, repo: _Repo, revision: str) -> bool:
        return revision in ("main", repo.commit)

    # -- /api/models/... --------------------------------------------------------------------

    def _api(self, parts: list[str], query: dict[str, str], head: bool) -> None:
        repo, rest = self.hub._find_repo(parts)
        if repo is None:
            return self._repo_not_found(head)
        if not rest:
            revision = "main"
        elif rest[0] == "revision" and len(rest) == 2:
            revision = rest[1]
        elif rest[0] == "tree" and len(rest) >= 2:
            return self._tree(repo, rest[1], "/".join(rest[2:]), query, head)
        else:
            return self._send(404, b"Not Found", head=head)
        if not self._revision_ok(repo, revision):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        siblings = []
        for filename in sorted(repo.files):
            entry: dict = {"rfilename": filename}
            if query.get("blobs", "").lower() == "true":
                data = repo.files[filename]
                entry["blobId"] = git_blob_id(data)
                entry["size"] = len(data)
                if repo.is_lfs(filename):
                    entry["lfs"] = {"sha256": self.hub.sha256(repo.name, filename), "size": len(data), "pointerSize": 135}
            siblings.append(entry)
        owner = repo.name.split("/")[0]
        self._json(
            {
                "_id": repo.commit[:24],
                "id": repo.name,
                "modelId": repo.name,
                "author": owner,
                "sha": repo.commit,
                "lastModified": _DATE,
                "createdAt": _DATE,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": ["gguf"],
                "library_name": "gguf",
                "siblings": siblings,
                "usedStorage": sum(len(d) for d in repo.files.values()),
            },
            head,
        )

    def _tree(self, repo: _Repo, revision: str, prefix: str, query: dict[str, str], head: bool) -> None:
        if not self._revision_ok(repo, revision):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        recursive = query.get("recursive", "").lower() == "true"
        expand = query.get("expand", "").lower() == "true"
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        entries: dict[str, dict] = {}
        for filename in sorted(repo.files):
            if not filename.startswith(base):
                continue
            rel = filename[len(base) :]
            if "/" in rel and not recursive:
                folder = base + rel.split("/")[0]
                entries.setdefault(
                    folder, {"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0, "path": folder}
                )
                continue
            if recursive:  # the folders on the way are listed too
                bits = rel.split("/")[:-1]
                for i in range(1, len(bits) + 1):
                    folder = base + "/".join(bits[:i])
                    entries.setdefault(
                        folder, {"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0, "path": folder}
                    )
            data = repo.files[filename]
            entry: dict = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": filename}
            if repo.is_lfs(filename):
                entry["lfs"] = {"oid": self.hub.sha256(repo.name, filename), "size": len(data), "pointerSize": 135}
            entries[filename] = entry
        if base and not entries:
            return self._error(404, "EntryNotFound", f"{prefix} does not exist on {revision}", head)
        if expand:
            for entry in entries.values():
                entry["lastCommit"] = {"id": repo.commit, "title": "Upload", "date": _DATE}
        self._json(list(entries.values()), head)

    # -- /{repo}/resolve/{rev}/{file} and /cdn/{sha256} ------------------------------------

    def _resolve(self, parts: list[str], head: bool) -> None:
        repo, rest = self.hub._find_repo(parts)
        if repo is None:
            return self._repo_not_found(head)
        revision, filename = rest[1], "/".join(rest[2:])
        if not self._revision_ok(repo, revision):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        if repo.gated and not self._authorized():
            return self._error(
                401,
                "GatedRepo",
                f"Access to model {repo.name} is restricted. You must have access to it and be authenticated to access it."
                " Please log in.",
                head,
            )
        if filename not in repo.files:
            return self._error(404, "EntryNotFound", "Entry not found", head, {"X-Repo-Commit": repo.commit})
        data = repo.files[filename]
        if repo.is_lfs(filename):
            sha = self.hub.sha256(repo.name, filename)
            # An LFS file is a redirect to the CDN, with the LFS metadata in X-Linked-* headers.
            headers = {
                "X-Repo-Commit": repo.commit,
                "ETag": f'"{git_blob_id(data)}"',
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "Location": f"{self.hub.cdn_url}/cdn/{quote(sha)}",
            }
            return self._send(302, b"", headers, head=head)
        self._send_bytes(data, {"X-Repo-Commit": repo.commit, "ETag": f'"{git_blob_id(data)}"'}, head)

    def _cdn(self, sha: str, head: bool) -> None:
        for repo in self.hub._repos.values():
            for filename, data in repo.files.items():
                if repo.is_lfs(filename) and self.hub.sha256(repo.name, filename) == sha:
                    return self._send_bytes(data, {"ETag": f'"{sha}"'}, head)
        self._send(404, b"Not Found", head=head)

    def _send_bytes(self, data: bytes, headers: dict[str, str], head: bool) -> None:
        size = len(data)
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted and not self.hub.ignore_range:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if match is None:
                return self._send(400, b"Bad Range", head=head)
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size or start > end:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
            status = 206
        body = data[start : end + 1]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        for key, value in headers.items():
            self.send_header(key, value)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        cut = self.hub._take_cut(len(body))
        if cut is not None:
            # Send part of the body, then hang up: the client sees a body shorter than Content-Length.
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)
