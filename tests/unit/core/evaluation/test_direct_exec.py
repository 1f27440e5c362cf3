"""A plain program call runs without bash (core.evaluation.shell.direct_argv), and what
it sees and does is what `bash -c` would have given it: the same program, arguments,
environment, output and exit status. Each case is run both ways and compared."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.evaluation.shell import direct_argv, run_shell

# A program that prints its arguments and environment, one item a line, sorted where
# order says nothing (bash and execve list variables in different orders).
SHOW = """#!/bin/sh
printf 'arg:%s\\n' "$0" "$@"
env | sort
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("show", "show2"):
        (bin_dir / name).write_text(SHOW)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "not-executable").write_text(SHOW)
    decoys = bin_dir / "decoys"  # programs named as bash's builtins, saying they ran
    decoys.mkdir()
    for name in ("true", "false"):
        (decoys / name).write_text(f"#!/bin/sh\necho decoy {name} ran\nexit 3\n")
        (decoys / name).chmod(0o755)
    # Found and executable, yet execve refuses them: bash then says why (a missing
    # interpreter), or runs the file as a script itself (no #! line).
    (bin_dir / "bad-interpreter").write_text("#!/nonexistent/sh\necho never\n")
    (bin_dir / "no-shebang").write_text('echo "as a script: $0 $1"\n')
    for name in ("bad-interpreter", "no-shebang"):
        (bin_dir / name).chmod(0o755)
    (tmp_path / "work").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "work")
    return tmp_path


def _env(folder: Path, **more: str) -> dict[str, str]:
    return {"PATH": f"{folder / 'bin'}:/usr/bin:/bin", "LANG": "C", **more}


def _named(value: str, names: dict[str, str]) -> str:
    for name, path in names.items():
        value = value.replace(name, path)
    return value


Outcome = tuple[int | None, str, str]  # exit status, stdout, stderr


def _both(command: str, cwd: Path, env: dict[str, str]) -> tuple[Outcome, Outcome]:
    ours = run_shell(command, cwd, timeout_s=10, env=env)
    bash = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    return (ours.exit_code, ours.stdout, ours.stderr), (bash.returncode, bash.stdout, bash.stderr)


@pytest.mark.parametrize(
    ("command", "more"),
    [
        ("show", {}),
        ("show one two  three", {}),
        ("show a=b --flag -x @all 50% x,y a:b", {}),
        ("show", {"SHLVL": "3", "OLDPWD": "/usr"}),
        ("show", {"SHLVL": "007"}),
        ("show", {"PWD": "LINK"}),  # a name of the folder that is not its real path: kept
        ("show", {"PWD": "/"}),  # a folder, but not this one: replaced
        ("show", {"PWD": "LINK/"}),  # names this folder as written: kept so
        ("show", {"PWD": "/LINK"}),
        ("show", {"PWD": "relative/path"}),
        ("./../bin/show2 x", {}),
        ("show", {"PATH": "BIN/:/usr/bin"}),  # `_` as bash joins it: no slash added
        ("show", {"PATH": "/nonexistent:BIN//:/usr/bin"}),
        ("true", {}),
        ("false", {}),
        # A `true` of the matrix's first on PATH: bash's builtin still answers.
        ("true", {"PATH": "BIN/decoys:/usr/bin:/bin"}),
        ("false", {"PATH": "BIN/decoys:/usr/bin:/bin"}),
        ("ls /nonexistent-folder", {}),
        ("bad-interpreter", {}),
        ("no-shebang arg", {}),
    ],
)
def test_a_plain_program_call_runs_without_bash_as_bash_would_run_it(
    folder: Path, command: str, more: dict[str, str]
) -> None:
    cwd = folder / "work"
    named = {"LINK": str(folder / "link"), "BIN": str(folder / "bin")}
    env = _env(folder, **{k: _named(v, named) for k, v in more.items()})
    assert direct_argv(command, cwd, env) is not None, "expected to run without bash"
    ours, bash = _both(command, cwd, env)
    assert ours == bash


@pytest.mark.parametrize(
    ("command", "more"),
    [
        ("echo hi", {}),  # a builtin: bash's echo, not /bin/echo
        ("true --help", {}),  # /bin/true would print its help
        ("test -d .", {}),
        ("cd .. && show", {}),
        ("show | sort", {}),
        ("show > out", {}),
        ("show $HOME", {}),
        ("show '$HOME'", {}),
        ("show *", {}),
        ("show ~", {}),
        ("show\nshow2", {}),
        ("show # a comment", {}),
        ("X=1 show", {}),
        ("nosuchprogram", {}),  # bash's "command not found", 127
        ("not-executable", {}),  # bash's "Permission denied", 126
        ("./bin", {}),
        ("show", {"BASH_ENV": "/dev/null"}),  # a startup file bash would read first
        ("show", {"SHELLOPTS": "xtrace"}),  # bash would trace the command to stderr
        ("show", {"BASH_FUNC_show%%": "() { echo function; }"}),  # an exported function
        ("show", {"SHLVL": "abc"}),
        ("show", {"OLDPWD": "/nonexistent"}),  # bash hides it
        ("show2", {"PATH": "bin:/usr/bin"}),  # found through a relative folder
        ("show2", {"PATH": "~/bin:/usr/bin"}),  # bash expands the ~ (HOME: the folder)
        ("show", {"IFS": ","}),  # bash resets it
        ("show", {"OPTIND": "4"}),
        ("show", {"PS1": "$ "}),  # a shell that is not interactive drops it
        ("", {}),
    ],
)
def test_what_only_bash_can_run_goes_through_bash(
    folder: Path, command: str, more: dict[str, str]
) -> None:
    cwd = folder if command == "./bin" or "PATH" in more else folder / "work"
    env = {**_env(folder, HOME=str(folder)), **more}
    assert direct_argv(command, cwd, env) is None
    ours, bash = _both(command, cwd, env)
    assert ours == bash


def test_every_variable_bash_sets_as_it_starts_sends_the_command_through_bash(
    folder: Path,
) -> None:
    """The names this machine's bash defines in an empty environment: given any of
    them, bash runs the command (a newer bash that sets one more fails here until the
    list knows it), except the few it passes on as given, where the program sees
    what bash would have given it."""
    own = subprocess.run(
        ["bash", "-c", "compgen -v"], env={}, capture_output=True, text=True, check=True
    ).stdout.split()
    assert {"IFS", "OPTIND", "BASH_VERSION", "PPID"} <= set(own)
    passed_on = {"SHELL", "TERM", "HOSTNAME", "HOSTTYPE", "MACHTYPE", "OSTYPE"}
    for name in own:
        if name in ("PATH", "PWD", "SHLVL", "_"):  # set by the tests above
            continue
        env = _env(folder, **{name: "1"})
        direct = direct_argv("show", folder / "work", env)
        if name in passed_on:
            assert direct is not None, name
            ours, bash = _both("show", folder / "work", env)
            assert ours == bash, name
        else:
            assert direct is None, name


def test_without_a_path_bash_searches_its_own_default(folder: Path) -> None:
    assert direct_argv("ls", folder, {"LANG": "C"}) is None


# Commands made of words that are plain, or not: either way run_shell must answer
# exactly as bash does.
_WORDS = st.sampled_from(
    ["show", "show2", "true", "false", "echo", "x", "-n", "a=b", "$HOME", "'q'", ";", "|",
     "*", "./../bin/show", "nosuch", "%", "@", "\t", "&&", "#"]
)  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(words=st.lists(_WORDS, min_size=1, max_size=4))
def test_any_command_gives_what_bash_gives(folder: Path, words: list[str]) -> None:
    command = " ".join(words)
    ours, bash = _both(command, folder / "work", _env(folder, HOME=str(folder)))
    assert _settled(ours, command) == _settled(bash, command), command


def _settled(result: Outcome, command: str) -> tuple[object, ...]:
    """A pipeline's stages run at once: their lines on stderr come in either order (a
    clean-clone CI run saw `* show2 | nosuch` give its two "not found" lines swapped)."""
    code, out, err = result
    return (code, out, sorted(err.splitlines())) if "|" in command else result
