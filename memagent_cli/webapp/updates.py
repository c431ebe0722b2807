"""What changes on an open page, as Server-Sent Events, from the trace store: a reading's new steps
(each drawn as the timeline draws it) and its progress until it ends, whatever process records it
(`ask`, `watch`, `batch`, the MCP server, this page); and, for the list of runs and a watch's table,
a word that it changed. The store is looked at every POLL_SECONDS: a step shows within that of its
record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, AsyncIterator

import anyio
from sse_starlette.sse import EventSourceResponse

from .views import memory_before, progress, run_view, step_views

if TYPE_CHECKING:
    from starlette.requests import Request

    from ..traces.store import TraceStore
    from .pages import Pages

POLL_SECONDS = 0.25
STEPS_AT_ONCE = 100  # steps one event carries at most (a continued run takes hundreds at once)
PING_SECONDS = 15


async def run_events(pages: Pages, request: Request) -> EventSourceResponse:
    """A run's new steps after `after`, its progress, and "ended" once it is no longer running."""
    run = await pages.run_of(request.path_params["run"])
    run_id, shown = run["id"], run_view(run)
    try:
        after = max(0, int(request.query_params.get("after", "0")))
    except ValueError:
        after = 0

    async def events() -> AsyncIterator[dict[str, Any]]:
        last, told = after, None
        while not await request.is_disconnected():

            def poll(store: TraceStore, start: int = last) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
                head = store.get_run(run_id, with_steps=False)
                steps = store.steps(run_id, start=start + 1, limit=STEPS_AT_ONCE)
                return head, steps, memory_before(store, head, start + 1) if steps else ""

            head, steps, before = await pages.read(poll)
            if steps:
                views = step_views(steps, before, set(), shown)
                yield {"event": "steps", "data": bytes(pages.render("_steps.html", steps=views).body).decode("utf-8")}
                last = int(steps[-1]["index"])
            state = {
                "status": head["status"],
                "steps": progress(head),
                "done": head.get("step_count") or 0,
                "total": head.get("steps_total"),
            }
            if state != told:
                yield {"event": "progress", "data": json.dumps(state)}
                told = state
            if head["status"] != "running" and len(steps) < STEPS_AT_ONCE:
                yield {"event": "ended", "data": json.dumps(state)}
                return
            if len(steps) < STEPS_AT_ONCE:
                await anyio.sleep(POLL_SECONDS)

    return EventSourceResponse(events(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


async def list_events(pages: Pages, request: Request) -> EventSourceResponse:
    """ "changed" whenever the runs the list shows (its filters') change: a new run, a step, an end."""
    from ..traces.store import STATUSES

    params = request.query_params
    status = params.get("status") if params.get("status") in STATUSES else None
    text, model = params.get("q") or None, params.get("model") or None

    async def events() -> AsyncIterator[dict[str, Any]]:
        seen = None
        while not await request.is_disconnected():
            found = await pages.read(lambda store: store.list_runs(status=status, text=text, model=model, limit=50))
            now = [(r["id"], r["status"], r.get("step_count"), r.get("answer") is not None) for r in found]
            if seen is not None and now != seen:
                yield {"event": "changed", "data": "1"}
            seen = now
            await anyio.sleep(POLL_SECONDS * 4)

    return EventSourceResponse(events(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


async def watch_events(pages: Pages, request: Request) -> EventSourceResponse:
    """ "changed" whenever a watch's table changes, until it ends."""
    ref = request.path_params["watch"]
    await pages.watch_of(ref)  # 404 for an unknown one

    async def events() -> AsyncIterator[dict[str, Any]]:
        seen = None
        while not await request.is_disconnected():
            watch = await pages.watch_of(ref)
            if seen is not None and watch["updated_at"] != seen:
                yield {"event": "changed", "data": "1"}
            seen = watch["updated_at"]
            if not watch["watching"]:
                yield {"event": "changed", "data": "1"}
                return
            await anyio.sleep(POLL_SECONDS * 2)

    return EventSourceResponse(events(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})
