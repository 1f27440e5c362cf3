"""Run one bash command in a folder, bounded in time and in captured output.

Agents, setup commands, gates and the built-in agent's bash tool all go through
here. The command gets its own process group so that at the timeout the whole
group dies, children that ignore SIGTERM included; output is read continuously
and only its head and tail are kept, so an agent that floods stdout costs
neither memory nor disk. An optional `watch` is asked every WATCH_INTERVAL_S
while the command runs; a reason from it stops the group (a workspace that
grows past its limit). An optional `on_stdout` sees each chunk of stdout as it
arrives and may stop the group the same way (a spend limit crossed).

A simple command (words of plain characters, the first naming a program on PATH)
is executed directly, as make does, rather than by a bash that would only exec it:
bash already runs the last command of `-c` in its own process, so the program, its
exit status and its environment are those bash would give it (`direct_argv`). That
saves a bash start, about a millisecond of CPU, on every agent and gate that is a
plain program call.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.evaluation.credentials import RunAs

DEFAULT_MAX_BYTES = 1_000_000
WATCH_INTERVAL_S = 0.5
_KILL_GRACE_S = 2.0
_EXIT_POLL_S = 0.05

# Asked while the command runs: a reason to stop it, or None to let it go on.
Watch = Callable[[], str | None]
# Given each chunk of stdout as it is read: likewise a reason to stop, or None.
StdoutWatch = Callable[[bytes], str | None]


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None  # None when killed (timeout, watch) or not started
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    truncated: bool = False
    error: str | None = None  # the command could not be started
    stopped: str | None = None  # why `watch` had it killed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class HeadTail:
    """Text bounded to about `limit` bytes: the first and last halves, with a cut marker."""

    def __init__(self, limit: int):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.half:
            cut = len(self.tail) - self.half
            self.dropped += cut
            del self.tail[:cut]

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes cut ...]\n{tail}"
        return head + tail


class _Output:
    """The command's stdout and stderr, drained as they come (so the command never
    blocks on a full pipe) into HeadTails."""

    def __init__(self, proc: subprocess.Popen[bytes], limit: int):
        assert proc.stdout is not None and proc.stderr is not None
        self.stdout, self.stderr = HeadTail(limit), HeadTail(limit)
        self.open = {proc.stdout.fileno(): self.stdout, proc.stderr.fileno(): self.stderr}

    def read(self, fd: int) -> bytes:
        """One read from a ready pipe; at its end the pipe is no longer open."""
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if chunk:
            self.open[fd].add(chunk)
        else:
            del self.open[fd]
        return chunk


# wide: keyword-only options, as subprocess.Popen's: each caller names those it sets
def run_shell(
    command: str,
    cwd: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    max_output_bytes: int = DEFAULT_MAX_BYTES,
    argv_prefix: Sequence[str] = (),
    watch: Watch | None = None,
    on_stdout: StdoutWatch | None = None,
    user: RunAs | None = None,
) -> ShellResult:
    """Run `command` with bash in `cwd`; never raises for the command's own failures.

    `argv_prefix` goes before `bash -c COMMAND` (a sandbox such as bwrap); `user`: the
    user it runs as (default: this process's).
    """
    start = time.monotonic()
    try:
        with user.this_thread() if user is not None else contextlib.nullcontext():
            proc = _start(command, argv_prefix, cwd, env)
    except OSError as exc:
        return ShellResult(None, "", "", False, time.monotonic() - start, error=str(exc))
    output = _Output(proc, max_output_bytes)
    timed_out, stopped = False, None
    with proc.stdout, proc.stderr:  # type: ignore[union-attr]
        try:
            timed_out, stopped = _supervise(proc, output, timeout_s, watch, on_stdout)
        finally:
            # Kill the group whether or not the leader exited (and on a Celery soft
            # time limit raised mid-wait): a background child left behind would
            # keep the pipes open and outlive the run.
            kill_group(proc.pid)
            proc.wait()
        _drain(output, time.monotonic() + _KILL_GRACE_S)
    return ShellResult(
        exit_code=None if timed_out or stopped else proc.returncode,
        stdout=output.stdout.text(),
        stderr=output.stderr.text(),
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        truncated=output.stdout.truncated or output.stderr.truncated,
        stopped=stopped,
    )


def _start(
    command: str, argv_prefix: Sequence[str], cwd: Path, env: Mapping[str, str] | None
) -> subprocess.Popen[bytes]:
    """`bash -c command` (after `argv_prefix`) started in a process group of its own,
    its output piped; without a prefix, the program bash would exec, where
    `direct_argv` says how."""
    environ = dict(env) if env is not None else dict(os.environ)
    direct = None if argv_prefix else direct_argv(command, cwd, environ)
    if direct is not None:
        program, args, direct_env = direct
        with contextlib.suppress(OSError):  # not executable after all: bash says why
            return _popen(args, cwd, direct_env, program)
    return _popen([*argv_prefix, "bash", "-c", command], cwd, environ)


def _popen(
    argv: list[str], cwd: Path, env: dict[str, str], program: str | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        executable=program,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


# Characters that bash gives no meaning in a word (no quoting, expansion, globbing,
# redirection or list).
_PLAIN_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-+,:@%=")
# Variables that change what `bash -c` does before it runs anything (a startup
# file, options, a search filter), and those bash sets, resets or drops as it starts
# (`env -i bash -c 'compgen -v'`, less the few it passes on as given: PATH, SHELL,
# TERM, HOSTNAME, HOSTTYPE, MACHTYPE, OSTYPE; PWD and SHLVL are set here as bash
# sets them). With any of them in the environment, bash runs the command.
_BASH_READS = frozenset(
    {
        "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "POSIXLY_CORRECT", "BASH_COMPAT",
        "EXECIGNORE", "BASH_XTRACEFD", "BASH", "BASHPID", "BASH_ALIASES", "BASH_ARGC",
        "BASH_ARGV", "BASH_ARGV0", "BASH_CMDS", "BASH_COMMAND", "BASH_EXECUTION_STRING",
        "BASH_LINENO", "BASH_LOADABLES_PATH", "BASH_SOURCE", "BASH_SUBSHELL",
        "BASH_VERSINFO", "BASH_VERSION", "COMP_WORDBREAKS", "DIRSTACK", "EPOCHREALTIME",
        "EPOCHSECONDS", "EUID", "GROUPS", "HISTCMD", "IFS", "LINENO", "OPTERR", "OPTIND",
        "PPID", "PS1", "PS2", "PS4", "RANDOM", "SECONDS", "SRANDOM", "UID",
    }
)  # fmt: skip
# The system's own `true` and `false`, which do what bash's builtins do: nothing but
# their exit status, whatever PATH holds (the builtin is found before any program).
_SYSTEM_BIN = ("/usr/bin", "/bin")

# bash's builtins and reserved words (`compgen -b -k`): bash runs these itself, so
# they keep going through it. `true` and `false` with no argument are the exception:
# the system's programs of those names do just what the builtins do, print nothing
# and exit 0 or 1 (with an argument, `true --help` prints its help where the builtin
# does not).
_BASH_OWN = frozenset(
    {
        ".", ":", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "command",
        "compgen", "complete", "compopt", "continue", "declare", "dirs", "disown", "echo",
        "enable", "eval", "exec", "exit", "export", "false", "fc", "fg", "getopts", "hash",
        "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd",
        "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift",
        "shopt", "source", "suspend", "test", "times", "trap", "true", "type", "typeset",
        "ulimit", "umask", "unalias", "unset", "wait", "if", "then", "else", "elif", "fi",
        "case", "esac", "for", "select", "while", "until", "do", "done", "in", "function",
        "time", "{", "}", "!", "[[", "]]", "coproc",
    }
)  # fmt: skip


def direct_argv(
    command: str, cwd: Path, env: Mapping[str, str]
) -> tuple[str, list[str], dict[str, str]] | None:
    """How to run `bash -c command` in `cwd` without bash: (the program's path, its
    arguments, its environment), or None when only bash can say what the command
    means. Bash execs a lone simple command in place of itself after setting three
    variables: `_` (the program's path), PWD (the working folder, unless the one it
    was given names that folder already) and SHLVL (its level raised and, at the
    exec, lowered again: the given level, 0 when it was none); these are set the
    same way here."""
    if not command.strip(" \t") or any(ch not in _PLAIN_WORD and ch not in " \t" for ch in command):
        return None
    words = command.split()
    if "=" in words[0]:  # a variable's assignment
        return None
    if words[0] in _BASH_OWN and not (words[0] in ("true", "false") and len(words) == 1):
        return None
    if any(name in _BASH_READS or name.startswith("BASH_FUNC_") for name in env):
        return None
    level = env.get("SHLVL", "0")
    if not (level.isdigit() and len(level) <= 3 and int(level) < 999):
        return None  # bash's own rules for odd levels (a reset, a warning) are its own
    old = env.get("OLDPWD")
    if old is not None and not os.path.isdir(old):
        return None  # bash would hide it from the program
    # `true` or `false` alone: the builtin, whatever PATH holds
    program = _system(words[0]) if words[0] in _BASH_OWN else _found(words[0], cwd, env)
    if program is None:
        return None  # bash says "command not found" (127), or runs a script itself
    pwd = env.get("PWD", "")
    if not (pwd.startswith("/") and _same(pwd, cwd)):
        pwd = os.path.realpath(cwd)
    return program, words, {**env, "PWD": pwd, "SHLVL": str(int(level)), "_": program}


def _found(name: str, cwd: Path, env: Mapping[str, str]) -> str | None:
    """The program bash's PATH search finds for `name` (a name with a slash is a path
    from `cwd`, and stays as written: a script's $0 is what was executed): a regular,
    executable file. None when there is none, or no PATH (bash has a default of its
    own), or a relative folder of PATH holds the name (bash then names it as
    relative), or PATH has a folder from `~` (which bash expands)."""
    if "/" in name:
        return name if _runnable(os.path.join(cwd, name)) else None
    if "PATH" not in env:
        return None
    folders = env["PATH"].split(":")
    if any(folder.startswith("~") for folder in folders):
        return None
    for folder in folders:
        if not folder.startswith("/"):
            if _runnable(os.path.join(cwd, folder, name)):
                return None
            continue
        # bash's own joining: one slash added unless the folder ends with one
        path = folder + name if folder.endswith("/") else f"{folder}/{name}"
        if _runnable(path):
            return path
    return None


def _system(name: str) -> str | None:
    paths = (f"{folder}/{name}" for folder in _SYSTEM_BIN)
    return next((path for path in paths if _runnable(path, roots_only=True)), None)


def _runnable(path: str, *, roots_only: bool = False) -> bool:
    """A regular file this user may execute (`roots_only`: and root's own)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # not there; a NUL byte
        return False
    owned = info.st_uid == 0 or not roots_only
    return stat.S_ISREG(info.st_mode) and owned and os.access(path, os.X_OK)


def _same(a: str, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _supervise(
    proc: subprocess.Popen[bytes],
    output: _Output,
    timeout_s: float,
    watch: Watch | None,
    on_stdout: StdoutWatch | None,
) -> tuple[bool, str | None]:
    """Read the output until the command exits: (timed out, why `watch` stopped it).

    One thread waits on both pipes and on the exit at once: a pidfd becomes
    readable the moment the process exits (Linux >= 5.3); elsewhere the exit is
    polled every _EXIT_POLL_S.
    """
    now = time.monotonic()
    deadline, next_watch = now + timeout_s, now + WATCH_INTERVAL_S
    poller = select.poll()
    for fd in output.open:
        poller.register(fd, select.POLLIN)
    stdout_fd = proc.stdout.fileno() if proc.stdout is not None else -1
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while (now := time.monotonic()) < deadline:
            wake = min(deadline, next_watch) if watch is not None else deadline
            if pidfd is None:
                wake = min(wake, now + _EXIT_POLL_S)
            for fd, _ in poller.poll(max(wake - now, 0) * 1000):
                if fd in output.open:
                    chunk = output.read(fd)
                    if fd not in output.open:
                        poller.unregister(fd)
                    watch_stdout = on_stdout if fd == stdout_fd and chunk else None
                    if watch_stdout is not None and (reason := watch_stdout(chunk)):
                        return False, reason
            if proc.poll() is not None:
                return False, None
            if watch is not None and time.monotonic() >= next_watch:
                if reason := watch():
                    return False, reason
                next_watch = time.monotonic() + WATCH_INTERVAL_S
        return True, None
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _drain(output: _Output, deadline: float) -> None:
    """What the killed group left in the pipes; bounded, since a process that
    escaped the group could hold a pipe open forever."""
    while output.open and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(list(output.open), [], [], left)
        for fd in ready:
            output.read(fd)


@dataclass(frozen=True)
class PidMark:
    """The last process id the kernel had handed out, and when it was read (pid_mark)."""

    pid: int
    at: float


# Linux hands out process ids counting up, back to the bottom past pid_max (4,194,304
# on 64-bit); a full turn in this long would take 70,000 new processes a second.
_PID_TURN_S = 60.0


def pid_mark() -> PidMark | None:
    """Every process started after this has a larger id, for a while (kill_groups_by_env);
    None where /proc does not say, or speaks of another pid namespace than ours."""
    try:
        if int(os.readlink("/proc/self")) != os.getpid():
            return None
        return PidMark(int(Path("/proc/loadavg").read_text().split()[-1]), time.monotonic())
    except (OSError, ValueError, IndexError):
        return None


def kill_groups_by_env(name: str, value: str, since: PidMark | None = None) -> int:
    """SIGKILL every process whose environment has name=value, and its process group
    (Linux /proc; elsewhere nothing is found), never the caller or its own group.
    With `since` (taken before the first such process could start), only processes
    started after it are read, unless process ids may have turned around meanwhile.
    Returns how many processes were found."""
    # Every run reads the environments of the machine's processes: those started
    # since the run began (every one, ~10 us each, took 1-2 ms a run on a quiet
    # machine and grew with every process a busy runner holds).
    entry = b"\0" + f"{name}={value}".encode() + b"\0"
    me = os.getpid()
    after = 0
    if since is not None and time.monotonic() - since.at < _PID_TURN_S:
        now = pid_mark()
        after = since.pid if now is not None and now.pid >= since.pid else 0
    found: dict[int, int] = {}  # pid -> its process group
    unread: dict[int, int] = {}  # pid -> reads that found arguments but no environment
    with os.scandir("/proc") as procs:
        for proc in procs:
            if not proc.name.isdigit() or int(proc.name) <= after or int(proc.name) == me:
                continue
            _read_marked(int(proc.name), entry, found, unread)
    # A process inside execve reads as having no environment until its new one is in
    # place: a left-behind `setsid sleep` caught there would be passed by. Read again;
    # one that keeps its arguments without an environment was started that way.
    for _ in range(_EXEC_RETRIES):
        pending = {pid: seen for pid, seen in unread.items() if seen < 3}
        if not pending:
            break
        time.sleep(0.005)
        unread = {}
        for pid, seen in pending.items():
            _read_marked(pid, entry, found, unread, seen)
    for pgid in set(found.values()) - {os.getpgrp()}:
        kill_group(pgid)
    # The process too: one may have been between groups (setsid) when it was read.
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


_EXEC_RETRIES = 20  # 5 ms apart: an exec that takes longer is not one in progress
_PF_KTHREAD = 0x00200000
_PF_EXITING = 0x00000004


def _read_marked(
    pid: int, entry: bytes, found: dict[int, int], unread: dict[int, int], seen: int = 0
) -> None:
    """Adds `pid` to `found` (with its process group) when its environment holds
    `entry`, or to `unread` when it has no environment to read (inside execve, or
    started without one), counting the reads that found its arguments; neither when
    it is gone, not ours to read, a kernel thread or exiting."""
    try:
        with open(f"/proc/{pid}/environ", "rb", buffering=0) as environ:
            read = environ.readall()
        if read and entry not in b"\0" + read + b"\0":
            return
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if read:
            found[pid] = int(fields[2])
        elif fields[0] not in ("Z", "X") and not int(fields[6]) & (_PF_KTHREAD | _PF_EXITING):
            unread[pid] = seen + bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except (OSError, ValueError, IndexError):  # exited meanwhile, or not ours to read
        return


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; quietly done if it is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
