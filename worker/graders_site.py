"""The graders' Python: the `sitecustomize` of every Python a gate or a verifier starts.

A gate runs in the agent's workspace, and `python3 -m unittest` or `python3 -c ...`
run there put the workspace first on sys.path: a unittest.py or json.py the agent
left there would be the module the gate runs, and the gate would pass on the
agent's word. The graders' environment turns that off (PYTHONSAFEPATH, Python
3.11+; on an older Python this file takes the entry back out) and puts this file's
folder first on PYTHONPATH. This file then:

- takes the workspace off sys.path (a PYTHONPATH entry inside it too) and serves
  its modules from a finder of its own, last: to the gate's own code only (its
  tests, its `-c`), never to the standard library's or an installed package's
  imports (their probes for optional modules, `org`, `__pypy__`, `trio`, would find
  the agent's), top-level names only (an installed namespace package stays
  installed), and no distributions (pytest's plugins are not looked for there);
- puts a script's folder first, as Python would (the tests' helpers beside them);
- runs the next `sitecustomize` on the path, which this one hides (a
  distribution's), never one from the workspace.

worker.workspace writes this file where the run's user cannot change it; imported
under its own name it does nothing. It parses on any Python 3 (no annotations
evaluated, no newer syntax): a task's image may have an old one.
"""

# Only what Python has loaded before `site`: any other import here would be looked
# for before the workspace is off the path.
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec, PathFinder
    from types import FrameType, ModuleType

# Python's options that take a value (`-W error`, `-Xdev`); `-c` and `-m` end them.
_VALUED = frozenset("WX")
_LONG_VALUED = frozenset({"--check-hash-based-pycs"})
# Never the agent's, whoever imports them.
_NEVER = frozenset({"sitecustomize", "usercustomize"})
# The workspace's folders taken off PYTHONPATH by worker.workspace (a matrix's `src`),
# for the finder to look in.
PLACES_ENV = "EVALFLEET_GRADERS_WORKSPACE_PATH"
# Installed code that imports a module a test names on the test's behalf: the test's
# own request (`mock.patch("answer.f")`, `pytest.importorskip("answer")`).
_ON_BEHALF = (
    os.path.join("unittest", "mock.py"),
    "pkgutil.py",
    os.path.join("_pytest", "monkeypatch.py"),
    os.path.join("_pytest", "outcomes.py"),
    os.path.join("multiprocessing", "spawn.py"),
)


def entry_of(argv: "list[str]") -> "tuple[str, str | None]":
    """What `python ARGV...` runs, from its full command line (sys.orig_argv): ("script",
    its path), ("module", its name), ("code", None) for `-c`, ("stdin", None) for a
    script from stdin or the interactive prompt."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            script = next(args, "-")
            return ("stdin", None) if script == "-" else ("script", script)
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


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class WorkspaceFinder:
    """The last finder on sys.meta_path: the workspace's top-level modules, for the
    gate's own code. `places`: the folders it looks in, the working folder last."""

    def __init__(self, places: "list[str]", installed: "list[str]") -> None:
        self.places = places
        self.installed = installed  # the standard library's and the packages' folders

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if path is not None or name in _NEVER or self._from_installed():
            return None
        return _path_finder().find_spec(name, self.places)

    def invalidate_caches(self) -> None:
        pass

    def _from_installed(self) -> bool:
        """Whether the import was asked for by installed code (not the gate's own):
        the first frame outside the import machinery, by its file."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            machinery = name.startswith("<frozen importlib") or _within(name, self._importlib)
            if not (machinery or name.endswith(_ON_BEHALF)):
                # The standard library's frozen modules (runpy, os) are installed code.
                frozen = name.startswith("<frozen")
                return frozen or any(_within(name, folder) for folder in self.installed)
            frame = frame.f_back
        return False

    @property
    def _importlib(self) -> str:
        import importlib

        return os.path.dirname(importlib.__file__ or "")


class _FirstImport:
    """On a Python before 3.11 (no PYTHONSAFEPATH): at the first import, after Python put
    the working folder first for `-c`, `-m` or stdin, take it back out."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if sys.path and sys.path[0] in ("", self.cwd):
            del sys.path[0]
            sys.meta_path.remove(self)
        return None


def _path_finder() -> "type[PathFinder]":
    import importlib.machinery

    return importlib.machinery.PathFinder


def _installed() -> "list[str]":
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return sorted({os.path.realpath(p) for p in prefixes} | prefixes)


def _settle() -> None:
    cwd = os.path.realpath(os.getcwd())
    installed = _installed()
    # Off the path: the working folder and what is in it, by its real path, but for a
    # Python's own folders (a venv made in the workspace; a working folder above them).
    places = [
        p
        for p in sys.path
        if p == "" or _within(os.path.realpath(p), cwd)
        if not any(_within(os.path.realpath(p), folder) for folder in installed)
    ]
    sys.path[:] = [p for p in sys.path if p not in places]
    handed = os.environ.get(PLACES_ENV, "")
    places += [p for p in handed.split(os.pathsep) if p]
    _next_sitecustomize()
    kind, what = _entry()
    if kind == "script" and what is not None:
        if getattr(sys.flags, "safe_path", False):
            sys.path.insert(0, _first_folder(what))
    elif not getattr(sys.flags, "safe_path", False):
        sys.meta_path.insert(0, _FirstImport(cwd))
    others = [os.path.realpath(p) for p in places if p and os.path.realpath(p) != cwd]
    sys.meta_path.append(WorkspaceFinder([*others, cwd], installed))


def _entry() -> "tuple[str, str | None]":
    """What this Python runs (entry_of). Before 3.10 there is no sys.orig_argv, and at
    this point sys.argv holds `-c`, `-m` or the script alone (nothing at all on 3.6)."""
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return entry_of(list(orig))
    first = (getattr(sys, "argv", None) or [""])[0]
    if first in ("-c", "-m"):
        return ("code" if first == "-c" else "module"), None
    return ("stdin", None) if first in ("", "-") else ("script", first)


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


def _next_sitecustomize() -> None:
    """The next `sitecustomize` on sys.path (which holds no workspace folder now)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    others = [entry for entry in sys.path if entry and os.path.abspath(entry) != here]
    spec = _path_finder().find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    _settle()
