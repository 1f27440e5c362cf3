"""worker.graders_site: the graders' Python finds the workspace's modules last (for
`-c`, `-m`, stdin) and a script's folder first, as Python would put it, whatever
options come before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from worker import graders_site
from worker.graders_site import entry_of
from worker.workspace import graders_python_path


@pytest.mark.parametrize(
    ("argv", "entry"),
    [
        (["python3", "-c", "print(1)"], ("code", None)),
        (["python3", "-m", "pytest", "x.py"], ("module", "pytest")),
        (["python3", "-Bc", "print(1)"], ("code", None)),
        (["python3", "-mpytest"], ("module", "pytest")),
        (["python3", "-"], ("stdin", None)),
        (["python3"], ("stdin", None)),
        (["python3", "check.py", "-c"], ("script", "check.py")),
        (["python3", "-W", "error", "check.py"], ("script", "check.py")),
        (["python3", "-Werror", "-X", "dev", "-u", "check.py"], ("script", "check.py")),
        (["python3", "--check-hash-based-pycs", "never", "check.py"], ("script", "check.py")),
        (["python3", "-E", "--", "-odd.py"], ("script", "-odd.py")),
        (["python3", "--", "-"], ("stdin", None)),
    ],
)
def test_what_a_command_line_runs(argv: list[str], entry: tuple[str, str | None]) -> None:
    assert entry_of(argv) == entry


def _python(folder: Path, *args: str, stdin: str = "") -> list[str]:
    """sys.path of a Python started in `folder` with the graders' settings."""
    site = folder / "site"
    site.mkdir(exist_ok=True)
    shutil.copy(graders_site.__file__, site / "sitecustomize.py")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, input=stdin, text=True,
        capture_output=True, check=True, timeout=30,
    )  # fmt: skip
    return ran.stdout.splitlines()


SHOW = "import sys; print(*sys.path, sep=chr(10))"


def test_the_working_folder_is_off_the_path_and_a_scripts_folder_first(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "show.py").write_text(SHOW)
    for path in (_python(work, "-c", SHOW), _python(work, "-", stdin=SHOW)):
        assert str(work) not in path and "" not in path, path
    assert _python(work, "-X", "dev", "tests/show.py")[0] == str(work / "tests")


def test_what_the_agent_leaves_runs_in_no_python_the_graders_start(tmp_path: Path) -> None:
    """A sitecustomize.py in the workspace, a module an installed one probes for
    (`org`, which the standard library's copy module tries), a json.py on a relative
    PYTHONPATH entry: none runs; the agent's own module still imports."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    for planted in (work / "sitecustomize.py", work / "org.py", work / "src" / "json.py"):
        planted.write_text("import os\nprint('the agent')\nos._exit(0)\n")
    (work / "answer.py").write_text("ANSWER = 42\n")
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(graders_site.__file__, site / "sitecustomize.py")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site)}
    env[graders_site.PLACES_ENV] = str(work / "src")  # a matrix's PYTHONPATH: src
    check = "import copy, json, answer; print(json.dumps(answer.ANSWER)); raise SystemExit(3)"
    ran = subprocess.run(
        [sys.executable, "-c", check], cwd=work, env=env, text=True, capture_output=True,
        timeout=30,
    )  # fmt: skip
    assert (ran.returncode, ran.stdout) == (3, "42\n"), ran


def test_a_module_the_python_lacks_is_not_found_in_the_working_folder(tmp_path: Path) -> None:
    """A runner's `python3 -m pytest --version` probe, where pytest is not installed,
    must fail, not run the agent's pytest.py."""
    (tmp_path / "not_installed_here.py").write_text("print('the agent')\n")
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(graders_site.__file__, site / "sitecustomize.py")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [sys.executable, "-m", "not_installed_here"], cwd=tmp_path, env=env, text=True,
        capture_output=True, timeout=30,
    )  # fmt: skip
    assert ran.returncode == 1 and "No module named not_installed_here" in ran.stderr, ran


def test_the_sitecustomize_it_hides_still_runs(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.NEXT = 'ran'\n")
    work = tmp_path / "work"
    work.mkdir()
    site = work / "site"
    site.mkdir()
    shutil.copy(graders_site.__file__, site / "sitecustomize.py")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": f"{site}{os.pathsep}{other}"}
    ran = subprocess.run(
        [sys.executable, "-c", "print(NEXT)"], cwd=work, env=env, text=True,
        capture_output=True, timeout=30,
    )  # fmt: skip
    assert ran.stdout.strip() == "ran", ran.stderr


def test_a_matrixs_python_path_in_the_workspace_is_kept_off_the_path(tmp_path: Path) -> None:
    """`PYTHONPATH: src:.:/opt/lib` in a matrix: its workspace folders go to the finder,
    which looks in them last (on the path, their .pth files would run at start-up)."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    outside, inside = graders_python_path(f"src{os.pathsep}.{os.pathsep}{os.pathsep}/opt/lib", work)
    assert outside == ["/opt/lib"]
    assert inside == [str((work / "src").resolve()), str(work.resolve())]


def test_the_gates_own_ways_of_naming_the_agents_module_still_reach_it(tmp_path: Path) -> None:
    """Installed code that imports what a test names, on its behalf: mock.patch's target,
    pkgutil.resolve_name."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "answer.py").write_text("def f():\n    return 41\n")
    check = (
        "import pkgutil; from unittest import mock\n"
        "with mock.patch('answer.f', return_value=42):\n"
        "    import answer; print(answer.f(), pkgutil.resolve_name('answer:f')())"
    )
    assert _python(work, "-c", check) == ["42 42"]


def test_a_venv_in_the_workspace_and_a_working_folder_above_the_python_keep_their_path(
    tmp_path: Path,
) -> None:
    """Terminal-Bench's runner makes a venv in the workspace (`uv venv .tbench-testing`):
    its site-packages stay on its path; so do the standard library's folders when the
    working folder is above them (a test's `cwd="/"`)."""
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
    python = work / "venv" / "bin" / "python"
    packages = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(packages, "in_the_venv.py").write_text("print('from the venv')\n")
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(graders_site.__file__, site / "sitecustomize.py")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [python, "-c", "import in_the_venv"], cwd=work, env=env, text=True,
        capture_output=True, timeout=30,
    )  # fmt: skip
    assert ran.stdout == "from the venv\n", ran
    ran = subprocess.run(
        [sys.executable, "-c", "import email.message, subprocess; print('ok')"], cwd="/",
        env=env, text=True, capture_output=True, timeout=30,
    )  # fmt: skip
    assert ran.stdout == "ok\n", ran
