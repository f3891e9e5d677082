"""The installed package as a user gets it: typed, and the README example works as written."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import sluice.v1.decider_pb2
import sluice_client
from conftest import Env

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_package_ships_type_information() -> None:
    pkg = pathlib.Path(sluice_client.__file__).parent
    gen = pathlib.Path(sluice.v1.decider_pb2.__file__).parent
    assert (pkg / "py.typed").is_file()
    assert (gen.parent / "py.typed").is_file()
    for name in ("decider_pb2.pyi", "decider_pb2_grpc.pyi", "admin_pb2.pyi", "errors_pb2.pyi"):
        assert (gen / name).is_file(), name


def readme_example(lang: str) -> str:
    """The first ```lang block of the README's Clients section."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Clients\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"no {lang} example in README.md's Clients section"
    return m.group(1)


def test_readme_example_runs_and_type_checks(env: Env, tmp_path: pathlib.Path) -> None:
    code = readme_example("python")
    assert len(code.strip().splitlines()) <= 10, "the README promises a Decide in at most ten lines"
    code = code.replace("localhost:7070", env.grpc).replace("router-token", env.decide_token)
    code = code.replace("sim-chat", "chat")
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "forward to http://127.0.0.1:9" in out.stdout, out.stdout

    # The same code checks under mypy --strict, which finds the installed package through its
    # py.typed marker (PEP 561) as it would for a user.
    typed = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, script.name],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr


def test_client_source_passes_mypy_strict() -> None:
    # pyproject.toml's [tool.mypy]: strict, over src/sluice_client with the generated stubs.
    here = pathlib.Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=here,
    )
    assert out.returncode == 0, out.stdout + out.stderr
