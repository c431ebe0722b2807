"""Arguments that are not UTF-8 (a Latin-1 terminal, a script passing bytes): text is decoded the way
documents are, with a note; paths keep their bytes, so the file is still found. No traceback, no
"internal error"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import CODEWORD_ASK, whole_fact

from memagent_cli.cli.textargs import decode_arguments

RUN = [*CODEWORD_ASK, "--temperature", "0", "--threads", "1"]


def memagent_bytes(*args, cwd, home):
    """memagent with raw byte arguments, as a shell in a Latin-1 locale passes them."""
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    env.update(NO_COLOR="1", MEMAGENT_HOME=str(home), LC_ALL="C.UTF-8")
    argv = [a if isinstance(a, bytes) else os.fsencode(str(a)) for a in args]
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"memagent_cli", *argv], capture_output=True, cwd=cwd, env=env, timeout=300
    )


def test_a_latin1_question_is_read_as_cp1252_and_answered(tmp_path):
    doc = whole_fact(300, 1)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    done = memagent_bytes("ask", "doc.txt", b"What is the code word, caf\xe9?", *RUN, "--json", cwd=tmp_path, home=tmp_path / "h")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "an argument is not UTF-8; it was read as cp1252: 'What is the code word, café?'" in err
    out = json.loads(done.stdout)
    assert out["question"] == "What is the code word, café?"
    listed = memagent_bytes("traces", "search", b"caf\xe9", "--json", cwd=tmp_path, home=tmp_path / "h")
    assert listed.returncode == 0, listed.stderr.decode()
    assert [hit["run_id"] for hit in json.loads(listed.stdout)["hits"]] == [out["trace"]]


def test_config_set_takes_a_latin1_value_without_a_traceback(tmp_path):
    done = memagent_bytes("config", "set", "default_model", b"n\xe9", cwd=tmp_path, home=tmp_path / "h")
    err = done.stderr.decode()
    assert "internal error" not in err and "Traceback" not in err
    assert "it was read as cp1252: 'né'" in err
    shown = memagent_bytes("config", "list", "--json", cwd=tmp_path, home=tmp_path / "h")
    if done.returncode == 0:
        assert json.loads(shown.stdout)["settings"]["default_model"] == "né"


def test_a_file_named_in_latin1_keeps_its_bytes_and_is_found(tmp_path):
    doc = whole_fact(300, 40)
    name = b"r\xe9sum\xe9.txt"
    with open(os.path.join(os.fsencode(tmp_path), name), "w", encoding="utf-8") as f:
        f.write(doc.text)
    done = memagent_bytes("ask", name, "What is the code word?", *RUN, "--no-trace", cwd=tmp_path, home=tmp_path / "h")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == doc.value and b"not UTF-8" not in done.stderr


def test_a_latin1_questions_file_is_read_with_a_note(tmp_path):
    doc = whole_fact(300, 80)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    (tmp_path / "qs.txt").write_bytes(b"What is the code word?\nQuel est le mot, s'il vous pla\xeet?\n")
    done = memagent_bytes(
        "ask", "doc.txt", "--questions", "qs.txt", *RUN, "--json", "--no-trace", cwd=tmp_path, home=tmp_path / "h"
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "qs.txt is not UTF-8; its questions were read as cp1252." in err
    assert [r["question"] for r in json.loads(done.stdout)["results"]][1] == "Quel est le mot, s'il vous plaît?"


def test_the_rule_keeps_paths_and_patterns_and_decodes_text(tmp_path):
    latin = os.fsdecode(b"caf\xe9")
    existing = tmp_path / os.fsdecode(b"r\xe9sum\xe9.txt")
    existing.write_text("x")
    notes: list[str] = []
    argv = ["ask", str(existing), "-o", latin, f"--csv={latin}", "--include", latin, latin, f"--seed={latin}"]
    got = decode_arguments(argv, notes.append)
    assert got == ["ask", str(existing), "-o", latin, f"--csv={latin}", "--include", latin, "café", "--seed=café"]
    assert len(notes) == 2 and all("cp1252" in n for n in notes)
    assert decode_arguments(["ask", "plain", "ünïcode"], notes.append) == ["ask", "plain", "ünïcode"] and len(notes) == 2


def test_short_texts_decode_as_documents_do():
    from memagent_cli.ingest.text import decode_text

    assert decode_text("déjà vu".encode()) == ("déjà vu", None)  # UTF-8 as is
    assert decode_text(b"caf\xe9?") == ("café?", "cp1252")  # detection alone reads Johab here
    assert decode_text("Grüße aus Köln, schön".encode("cp1252")) == ("Grüße aus Köln, schön", "cp1252")
    assert decode_text("こんにちは世界の質問".encode("cp932")) == ("こんにちは世界の質問", "cp932")
    assert decode_text("Zażółć gęślą jaźń".encode("cp1250"))[0] == "Zażółć gęślą jaźń"


def leaf_commands():
    """Every command of the CLI as (its words, its click command), walked from the app itself."""
    import typer

    from memagent_cli.cli.app import app

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    return list(walk(typer.main.get_command(app), []))


# What each command needs besides the argument under test to get past its own usage checks.
BASE = {
    "ask": ["doc.txt", "What?"],
    "batch": ["job.jsonl", "-o", "out.jsonl"],
    "inspect": ["doc.txt"],
    "traces show": ["last"],
    "traces diff": ["last", "1", "2"],
    "traces export": ["last"],
    "traces search": ["x"],
    "traces rm": ["x"],
    "traces release": ["x"],
    "eval run": ["items.jsonl"],
    "eval make-niah": ["--tokens", "600", "--n", "1", "--out", "niah.jsonl"],
    "models pull": ["x"],
    "models convert": ["x"],
    "models add": ["doc.txt"],
    "models rm": ["x"],
    "models path": ["x"],
    "models info": ["x"],
    "config get": ["threads"],
    "config set": ["threads", "2"],
}


def test_every_command_takes_bytes_that_are_not_utf8_in_each_argument(tmp_path, monkeypatch, capsys):
    """Each text-taking argument and option of every command, given Latin-1 bytes (as Python hands
    them over: lone surrogates), ends in a result or a one-line error: never "internal error" or a
    traceback. Run in this process (through main(), as the installed command runs) to keep it quick;
    no model is installed here, so nothing goes on to load one."""
    import io

    from memagent_cli.cli.app import main
    from memagent_cli.cli.textargs import PATH_OPTIONS

    latin = os.fsdecode(b"caf\xe9")
    checked = 0
    for words, command in leaf_commands():
        name = " ".join(words)
        base = BASE.get(name, [])
        for param in command.params:
            if getattr(param, "is_flag", False) or param.name == "help":
                continue
            if param.param_type_name == "argument":
                given = [latin] + base[1:] if base and not base[0].startswith("-") else [latin, *base]
                if name == "config set" and param.name == "value":
                    given = ["threads", latin]
            else:
                given = [*base, param.opts[0], latin]
            here = tmp_path / str(checked)  # a file one case writes (--out café) is no path of the next
            here.mkdir()
            (here / "doc.txt").write_text("A short document.\n", encoding="utf-8")
            monkeypatch.chdir(here)
            monkeypatch.setattr(sys, "argv", ["memagent", *words, *given])
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
            try:
                main()
            except SystemExit:
                pass
            err = capsys.readouterr().err
            what = f"memagent {name} {' '.join(given)!a}"
            assert "internal error" not in err and "Traceback" not in err, f"{what}:\n{err}"
            opts = set(getattr(param, "opts", ()))
            if param.param_type_name == "option" and not opts & PATH_OPTIONS:
                assert "read as cp1252: 'café'" in err, f"{what}: the text was not decoded:\n{err}"
            checked += 1
    assert checked > 100  # every command was walked, not a few
