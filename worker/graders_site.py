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


def script_of(argv: list[str]) -> str | None:
    """The script `python ARGV...` runs, from its full command line (sys.orig_argv);
    None for `-c`, `-m`, stdin and the interactive prompt."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "-" or not arg.startswith("-"):
            return None if arg == "-" else arg
        if arg.startswith("--"):
            if arg in _LONG_VALUED:
                next(args, None)
            continue
        for at, flag in enumerate(arg[1:], start=2):
            if flag in "cm":
                return None
            if flag in _VALUED:
                if at == len(arg):  # its value is the next argument
                    next(args, None)
                break
    return None


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
    script = script_of(list(getattr(sys, "orig_argv", sys.argv)))
    if script is None:
        sys.path.append(os.getcwd())
    else:
        sys.path.insert(0, _first_folder(script))


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
