"""The graders' Python: the `sitecustomize` of every Python a gate or a verifier starts.

A gate runs in the agent's workspace, and `python3 -m pytest` or `python3 -c ...`
run there put the workspace first on sys.path: a pytest.py or json.py the agent
left there would be the module the gate runs, and the gate would pass on the
agent's word. The graders' environment turns that off (PYTHONSAFEPATH, Python
3.11+) and puts this file's folder on PYTHONPATH, and this file gives back what
PYTHONSAFEPATH took, where it cannot steer the gate:

- `-c`, `-m`, a script from stdin: the working folder goes last on sys.path, so
  the tests still import the agent's modules (`from solution import add`) but no
  module of the agent's is found before the standard library's or an installed one;
  `-m` of a module that is not installed gets no working folder at all, so the
  agent's pytest.py cannot stand in for a pytest the graders' Python lacks;
- a script: its folder goes first, as Python puts it (the tests' helper modules
  beside it).

Then the next `sitecustomize` on the path, which this one hides (a distribution's,
coverage's), runs as it would have. worker.workspace writes this file into the
graders' home, made after the agent ended; imported under its own name it does
nothing.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

# Python's options that take a value (`-W error`, `-Xdev`); `-c` and `-m` end them.
_VALUED = frozenset("WX")
_LONG_VALUED = frozenset({"--check-hash-based-pycs"})


def entry_of(argv: list[str]) -> tuple[str, str | None]:
    """What `python ARGV...` runs, from its full command line (sys.orig_argv): ("script",
    its path), ("module", its name), ("code", None) for `-c`, ("stdin", None) for a
    script from stdin or the interactive prompt."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            script = next(args, None)
            return ("script", script) if script is not None else ("stdin", None)
        if arg == "-":
            return "stdin", None
        if not arg.startswith("-"):
            return "script", arg
        if arg.startswith("--"):
            if arg in _LONG_VALUED:
                next(args, None)
            continue
        for at, flag in enumerate(arg[1:], start=2):
            if flag == "c":
                return "code", None
            if flag == "m":
                return "module", arg[at:] if at < len(arg) else next(args, None)
            if flag in _VALUED:
                if at == len(arg):  # its value is the next argument
                    next(args, None)
                break
    return "stdin", None


def _first_folder(script: str) -> str:
    """What Python puts first on sys.path for `script`: a folder or zip run as a whole,
    else the folder the script (its links followed) is in."""
    if os.path.isdir(script) or _is_zip(script):
        return os.path.abspath(script)
    return os.path.dirname(os.path.realpath(script))


def _is_zip(path: str) -> bool:
    try:
        with open(path, "rb") as opened:
            return opened.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _path_back() -> None:
    if not getattr(sys.flags, "safe_path", False):
        return  # a Python before 3.11 put the working folder first: nothing to give back
    kind, what = entry_of(list(getattr(sys, "orig_argv", sys.argv)))
    if kind == "script" and what is not None:
        sys.path.insert(0, _first_folder(what))
    elif kind == "module" and not _installed(what):
        # `python3 -m pytest` where pytest is missing fails as it should: not with the
        # agent's pytest.py (a runner's `python3 -m pytest --version` probe included).
        return
    else:
        sys.path.append(os.getcwd())


def _installed(module: str | None) -> bool:
    """Whether the top-level package of `module` is found without the working folder."""
    if not module:
        return False
    return importlib.util.find_spec(module.split(".")[0]) is not None


def _next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    others = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    _path_back()
    _next_sitecustomize()
