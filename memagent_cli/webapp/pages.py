"""The page's routes: each reads the trace store (a connection of its own, in a worker thread: SQLite's
is one thread's), asks the run layer for what a reading needs, and renders a template (views.py
gives the templates their records). A request that asks for something carries the page's secret
(gate.checked_form). An unknown run, a path outside the roots or a page that cannot be drawn is a
page that says so, with its status; never a traceback.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, TypeVar
from urllib.parse import urlencode

import anyio.to_thread
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..display import clip
from ..errors import MemagentError
from ..runs.guard import Roots
from ..traces.sharing import shared_time
from ..traces.store import STATUSES, TraceStore
from . import evidence
from .gate import checked_form
from .views import CLIP, LEGEND, STEPS_PAGE, evidence_of, memory_before, run_row, run_view, step_views

if TYPE_CHECKING:
    from jinja2 import Environment
    from starlette.requests import Request

    from ..runs.shared import RunRequest
    from .page_settings import PageSettings
    from .readings import Readings

T = TypeVar("T")
LIST_PAGE = 50  # runs or conversations a list shows at once
LAZY_EVIDENCE = 500  # steps past which a run's evidence marks come after its page is drawn


class Pages:
    """The handlers, over the page's settings, its readings and its templates."""

    def __init__(self, settings: PageSettings, readings: Readings, templates: Environment):
        self.settings, self.readings, self.templates = settings, readings, templates
        self.roots = Roots(settings.roots, given="the ROOTs of memagent serve:")

    # helpers ---------------------------------------------------------------------------

    def render(self, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(secret=self.settings.secret, legend=LEGEND, **context)
        return HTMLResponse(html, status_code=code)

    async def read(self, action: Callable[[TraceStore], T]) -> T:
        """`action` on a store connection of its own, in a worker thread."""

        def work() -> T:
            with TraceStore() as store:
                return action(store)

        return await anyio.to_thread.run_sync(work)

    async def run_of(self, run_id: str) -> dict[str, Any]:
        """The stored run `run_id` names (a full id or a unique prefix); 404 where none."""
        try:
            return await self.read(lambda store: store.get_run(run_id, with_steps=False))
        except MemagentError as exc:
            raise HTTPException(404, exc.message) from None

    # lists -----------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        params = request.query_params
        q, status, model = params.get("q", "").strip(), params.get("status", ""), params.get("model", "").strip()
        status = status if status in STATUSES else ""
        offset = _int(params.get("offset"), 0)
        found = await self.read(
            lambda store: store.list_runs(
                status=status or None, text=q or None, model=model or None, limit=LIST_PAGE + 1, offset=offset
            )
        )
        context: dict[str, Any] = {
            "rows": [run_row(r) for r in found[:LIST_PAGE]],
            "more": len(found) > LIST_PAGE,
            "offset": offset,
            "limit": LIST_PAGE,
            "filtered": bool(q or status or model),
            "query": urlencode({k: v for k, v in (("q", q), ("status", status), ("model", model)) if v}),
        }
        if params.get("fragment"):
            return self.render("_runs.html", **context)
        return self.render("runs.html", nav="runs", q=q, status=status, model=model, statuses=STATUSES, **context)

    async def conversations(self, request: Request) -> Response:
        offset = _int(request.query_params.get("offset"), 0)
        found = await self.read(lambda store: store.conversations(limit=LIST_PAGE + 1, offset=offset))
        rows = [
            {
                "id": c["id"],
                "last": shared_time(c["last_at"] or c["started_at"]),
                "question": clip(c["question"], CLIP),
                "turns": c["turns"],
            }
            for c in found[:LIST_PAGE]
        ]
        return self.render(
            "conversations.html", nav="conversations", rows=rows, more=len(found) > LIST_PAGE, offset=offset, limit=LIST_PAGE
        )

    async def conversation(self, request: Request) -> Response:
        ref = request.path_params["cid"]

        def load(store: TraceStore) -> tuple[dict[str, Any], dict[str, Any] | None]:
            found = store.conversation(ref)
            try:
                first = store.get_run(found["first_run"], with_steps=False)
            except MemagentError:
                first = None
            return found, first

        try:
            found, first = await self.read(load)
        except MemagentError as exc:
            raise HTTPException(404, exc.message) from None
        titles = [str(s.get("title") or s.get("path")) for s in (first or {}).get("sources") or []]
        return self.render("conversation.html", nav="conversations", conversation=found, sources=", ".join(titles) or "?")

    async def watches(self, request: Request) -> Response:
        from ..traces.watchlog import WatchLog

        def load() -> list[dict[str, Any]]:
            with WatchLog() as log:
                return log.watches(limit=LIST_PAGE)

        return self.render("watches.html", nav="watches", rows=await anyio.to_thread.run_sync(load))

    async def watch(self, request: Request) -> Response:
        watch = await self.watch_of(request.path_params["watch"])
        if request.query_params.get("fragment"):
            return self.render("_watch.html", watch=watch)
        return self.render("watch.html", nav="watches", watch=watch)

    async def watch_of(self, ref: str) -> dict[str, Any]:
        """A watch and its rows (a unique prefix of its id); 404 where none."""
        from ..traces.watchlog import WatchLog

        def load() -> dict[str, Any]:
            with WatchLog() as log:
                return log.watch(ref)

        try:
            return await anyio.to_thread.run_sync(load)
        except MemagentError as exc:
            raise HTTPException(404, exc.message) from None

    # a run -------------------------------------------------------------------------------

    async def run(self, request: Request) -> Response:
        run = await self.run_of(request.path_params["run"])
        if run["id"] != request.path_params["run"]:  # a prefix: the page's own address is the whole id
            return RedirectResponse(f"/runs/{run['id']}", status_code=307)
        lazy = (run.get("step_count") or 0) > LAZY_EVIDENCE
        view = run_view(run)

        def load(store: TraceStore) -> list[dict[str, Any]]:
            marked = set() if lazy else evidence_of(store, run)
            steps = store.steps(run["id"], limit=STEPS_PAGE)
            return step_views(steps, memory_before(store, run, 1), marked, view)

        steps = await self.read(load)
        quotes, notes = await anyio.to_thread.run_sync(lambda: evidence.quotes_of(run, self.roots))
        last = steps[-1]["index"] if steps else 0
        count = run.get("step_count") or 0
        return self.render(
            "run.html",
            nav="runs",
            run=view,
            steps=steps,
            last_index=last if count <= STEPS_PAGE else count,
            next_from=last + 1 if count > len(steps) else None,
            quotes=quotes,
            quote_notes=notes,
            reused=request.query_params.get("reused") == "1",
            lazy_evidence=lazy,
        )

    async def steps(self, request: Request) -> Response:
        """Steps from `start` on, a page of them: a fragment for the timeline, or a page of its own."""
        run = await self.run_of(request.path_params["run"])
        start = max(1, _int(request.query_params.get("start"), 1))
        count = min(max(1, _int(request.query_params.get("count"), STEPS_PAGE)), 500)
        view = run_view(run)

        def load(store: TraceStore) -> list[dict[str, Any]]:
            found = store.steps(run["id"], start=start, limit=count)
            return step_views(found, memory_before(store, run, start), set(), view)

        steps = await self.read(load)
        last = steps[-1]["index"] if steps else start - 1
        more = (run.get("step_count") or 0) > last
        if request.query_params.get("fragment"):
            response = self.render("_steps.html", steps=steps)
            response.headers["X-Next"] = f"/runs/{run['id']}/steps?start={last + 1}&fragment=1" if more else ""
            return response
        return self.render(
            "run.html",
            nav="runs",
            run=view,
            steps=steps,
            last_index=last,
            next_from=last + 1 if more else None,
            quotes=[],
            quote_notes=[],
            reused=False,
            lazy_evidence=True,
        )

    async def evidence_steps(self, request: Request) -> Response:
        """A long run's evidence steps, marked on its page once it is drawn."""
        run = await self.run_of(request.path_params["run"])
        marked = await self.read(lambda store: evidence_of(store, run))
        return JSONResponse({"evidence": sorted(marked)})

    async def quote(self, request: Request) -> Response:
        run = await self.run_of(request.path_params["run"])
        number = _int(request.path_params["n"], 0)
        places = run.get("quotes") or []
        if not 1 <= number <= len(places):
            raise HTTPException(404, f"Run {run['id'][:8]} has no quote {number} (it has {len(places)}).")
        (quote,), notes = await anyio.to_thread.run_sync(lambda: evidence.quotes_of(run, self.roots, only=number))
        pages: list[dict[str, Any]] = []
        source = evidence.source_index(run, quote) if quote else None
        missed = False
        if quote is not None and source is not None and (run["sources"][source].get("kind") == "pdf"):
            text, on = str(quote["text"]), quote.get("pages")
            try:
                path = evidence.readable_source(run, source, self.roots)
                found = await anyio.to_thread.run_sync(lambda: evidence.pdf_pages(path, text, on))
            except MemagentError as exc:
                notes.append(exc.message)
                found = []
            missed = not found
            pages = [{"number": p.number, "boxes": p.boxes, "width": p.width, "height": p.height} for p in found]
        if quote is not None and source is not None:
            quote = {**quote, "source_title": run["sources"][source].get("title")}
        return self.render(
            "quote.html",
            nav="runs",
            run=run_view(run),
            number=number,
            count=len(places),
            quote=quote,
            pages=pages,
            source=source,
            notes=notes,
            pdf_missed=missed,
        )

    async def page_image(self, request: Request) -> Response:
        run = await self.run_of(request.path_params["run"])
        index, number = _int(request.path_params["source"], -1), _int(request.path_params["page"], 0)
        try:
            path = evidence.readable_source(run, index, self.roots)
            png = await anyio.to_thread.run_sync(lambda: evidence.page_png(path, number))
        except MemagentError as exc:
            raise HTTPException(404, exc.message) from None
        return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    # asking --------------------------------------------------------------------------------

    async def ask_form(self, request: Request) -> Response:
        from .browse import folder

        params = request.query_params
        here, entries = folder(self.settings.roots, _int(params.get("root"), 0), params.get("dir", ""))
        model = os.path.basename(self.settings.run.model or "") or "the served model"
        return self.render("ask.html", nav="ask", here=here, entries=entries, roots=self.settings.roots, model=model)

    async def ask(self, request: Request) -> Response:
        from ..core.jobs import Job
        from ..core.pipeline import SourceOptions
        from ..runs.requests import answer_settings, find_documents, within_budgets
        from ..runs.shared import RunRequest

        form = await checked_form(request, self.settings)
        paths = [p for p in form.getlist("path") if isinstance(p, str) and p]
        question = str(form.get("question") or "").strip()
        schema = str(form.get("schema") or "").strip()
        if not paths:
            raise HTTPException(400, "Choose the documents to read: tick them in the list.")
        try:
            config = within_budgets(self.settings.run.config, answer_settings(schema or None, None, "fields"))
        except MemagentError as exc:
            raise HTTPException(400, exc.message) from None
        if not question and not config.answer_schema:
            raise HTTPException(400, "Type a question (or fields to fill).")
        fresh = form.get("fresh") == "1"

        def plan() -> RunRequest:
            notes: list[str] = []
            documents = find_documents(paths, self.roots, self.settings.cwd, SourceOptions(ocr=self.settings.ocr), notes)
            job = Job(key=question, question=question, sources=tuple(documents), title=question)
            return RunRequest(job, config, fresh=fresh, turn=True)

        return self.started(plan)

    async def follow_up(self, request: Request) -> Response:
        from ..core.jobs import Job
        from ..runs.requests import conversation_turn
        from ..runs.shared import RunRequest

        form = await checked_form(request, self.settings)
        question = str(form.get("question") or "").strip()
        if not question:
            raise HTTPException(400, "Type the follow-up question.")
        ref, fresh = request.path_params["cid"], form.get("fresh") == "1"
        config = self.settings.run.config

        def plan() -> RunRequest:
            cid, documents, history = conversation_turn(ref, self.roots)
            job = Job(key=question, question=question, sources=tuple(documents), title=question, history=history)
            return RunRequest(job, config, fresh=fresh, turn=True, conversation=cid)

        return self.started(plan)

    async def resume(self, request: Request) -> Response:
        from ..runs.requests import resumption

        await checked_form(request, self.settings)
        run = await self.run_of(request.path_params["run"])
        return self.started(lambda: resumption(run["id"], self.roots, self.readings.model))

    async def stop(self, request: Request) -> Response:
        await checked_form(request, self.settings)
        run = await self.run_of(request.path_params["run"])
        if not self.readings.stop(run["id"]):
            raise HTTPException(
                409, f"Run {run['id'][:8]} is not a reading this page started; stop it where it runs (Ctrl-C in its terminal)."
            )
        return RedirectResponse(f"/runs/{run['id']}", status_code=303)

    def started(self, plan: Callable[[], RunRequest]) -> Response:
        reading = self.readings.start(plan)
        return RedirectResponse(f"/readings/{reading.number}", status_code=303)

    async def reading(self, request: Request) -> Response:
        """A reading the page started: its run once recorded, else what it waits for (JSON for the script)."""
        reading = self.readings.get(_int(request.path_params["n"], 0))
        if reading is None:
            raise HTTPException(404, "No such reading (the server was restarted?). Its run, if it began, is in the list.")
        target = f"/runs/{reading.run}" + ("?reused=1" if reading.reused else "") if reading.run else None
        if request.query_params.get("json"):
            return JSONResponse({"run": target, "error": reading.error, "waiting": reading.waiting, "notes": reading.notes})
        if target is not None:
            return RedirectResponse(target, status_code=303)
        return self.render("reading.html", reading=reading)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
