"""`memagent traces rm` never removes a run still running: real `memagent ask` processes, a real
SQLite store in MEMAGENT_HOME. A run whose process died is marked interrupted, then removable."""

import json
import sqlite3

from helpers import read_line, run_memagent, spawn_memagent, words

from memagent_cli.traces.store import TraceStore

SMALL = ["--chunk-tokens", "200", "--memory-tokens", "24", "--answer-tokens", "8", "--temperature", "0"]


def runs() -> list[dict]:
    proc = run_memagent("traces", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"]


def finished_run(question: str) -> str:
    """A complete run recorded in the store, as an earlier `ask` would leave it."""
    with TraceStore() as store:
        run_id = store.create_run(question=question, sources=[], model={}, settings={}, started_at="2024-01-01T00:00:00Z")
        store.finish_run(run_id, "complete", answer="yes")
    return run_id


def test_a_running_run_is_kept_until_its_process_dies(models, tmp_path, spawned):
    doc = tmp_path / "long.txt"
    doc.write_text(words(30000), encoding="utf-8")  # some 380 steps: it runs for a minute
    old = finished_run("an old finished run")
    proc = spawn_memagent("ask", doc, "Where?", "-m", models["random"], *SMALL)
    spawned.append(proc)
    for _ in range(2):
        assert read_line(proc).startswith("step ")
    (run,) = [r for r in runs() if r["id"] != old]
    run_id, short = run["id"], run["id"][:8]
    assert run["status"] == "running"

    # While it runs: --older-than removes the rest and keeps it, and says so.
    swept = run_memagent("traces", "rm", "--older-than", "0s")
    assert swept.returncode == 0, swept.stderr
    assert swept.stderr.splitlines() == ["removed 1 run", f"kept 1 run still running: {short} (pid {proc.pid})"]
    # Named, it is refused in one line.
    named = run_memagent("traces", "rm", short)
    assert named.returncode == 1
    assert named.stderr == (
        f"error: Run {short} is still running (pid {proc.pid}). "
        f"Stop it first (Ctrl-C in its terminal, or kill {proc.pid}), then remove it.\n"
    )
    # Nor can another memagent take it over by resuming it.
    resumed = run_memagent("ask", "--resume", short)
    assert resumed.returncode == 2 and resumed.stderr.startswith(f"error: Run {short} is still running in another memagent.")
    assert proc.poll() is None  # it was running throughout
    assert [(r["id"], r["status"]) for r in runs()] == [(run_id, "running")]

    # Killed so that it cannot mark itself: the next look finds it interrupted.
    proc.kill()
    proc.wait(timeout=30)
    (run,) = runs()
    assert run["status"] == "interrupted" and run["step_count"] >= 2
    assert run["error"] == f"Its process (pid {proc.pid}) ended without finishing the run."
    listed = run_memagent("traces", "list")
    (row,) = [line.split() for line in listed.stdout.splitlines() if line.startswith(short)]
    assert row[3] == "interrupted"  # id, the day, the time, then the status
    removed = run_memagent("traces", "rm", short)
    assert removed.returncode == 0 and removed.stderr == f"removed {short}\n"
    assert runs() == []


def test_a_run_killed_before_anyone_looked_is_removed_by_older_than(models, tmp_path, spawned):
    doc = tmp_path / "long.txt"
    doc.write_text(words(30000), encoding="utf-8")
    proc = spawn_memagent("ask", doc, "Where?", "-m", models["random"], *SMALL)
    spawned.append(proc)
    assert read_line(proc).startswith("step ")
    proc.kill()
    proc.wait(timeout=30)
    swept = run_memagent("traces", "rm", "--older-than", "0s")
    assert swept.returncode == 0 and swept.stderr == "removed 1 run\n"
    assert runs() == []


def test_a_run_on_another_host_is_kept_and_reported(memagent_home):
    with TraceStore() as store:
        run_id = store.create_run(question="q", sources=[], model={}, settings={}, started_at="2024-01-01T00:00:00Z")
    conn = sqlite3.connect(memagent_home / "traces.db", isolation_level=None)
    conn.execute("UPDATE runs SET host = 'gpu-box.example', pid = 4242 WHERE id = ?", (run_id,))
    conn.close()
    short = run_id[:8]

    swept = run_memagent("traces", "rm", "--older-than", "1d")
    assert swept.returncode == 0
    assert swept.stderr.splitlines()[:2] == ["removed 0 runs", f"kept 1 run still running: {short} (pid 4242 on gpu-box.example)"]
    assert "memagent traces release ID" in swept.stderr.splitlines()[2]
    named = run_memagent("traces", "rm", short)
    assert named.returncode == 1 and len(named.stderr.splitlines()) == 1
    assert "running on another host (pid 4242 on gpu-box.example)" in named.stderr and "kill 4242 on that host" in named.stderr
    assert f"memagent traces release {short}" in named.stderr
    resumed = run_memagent("ask", "--resume", short)
    assert resumed.returncode == 2 and f"memagent traces release {short}" in resumed.stderr
    assert [(r["id"], r["status"]) for r in runs()] == [(run_id, "running")]

    # Its container is gone, say: released, it is interrupted, and can be removed.
    released = run_memagent("traces", "release", short)
    assert released.returncode == 0 and released.stderr == f"released {short} (pid 4242 on gpu-box.example): now interrupted\n"
    (run,) = runs()
    assert run["status"] == "interrupted" and "pid 4242 on gpu-box.example" in run["error"]
    again = run_memagent("traces", "release", short)
    assert again.returncode == 2 and again.stderr == (
        f"error: Run {short} is not running: there is nothing to release. "
        f"Resume it (memagent ask --resume {short}) or remove it as it is.\n"
    )
    assert run_memagent("traces", "rm", short).returncode == 0 and runs() == []
