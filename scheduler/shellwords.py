"""What a bash command line runs: the command word of each of its simple commands,
and the script an interpreter is given (scheduler.mistakes looks these up beside the
matrix).

Read as bash reads it, without running anything: shlex splits the words (quotes
removed) and the operators; comments and here-documents' bodies are left out first.
A command word is the first word of a simple command that is not an assignment
(`VAR=value cmd`) or a redirection (`2>/dev/null cmd`), in a list or a pipeline, a
subshell or a `{ ...; }` group, a `$(...)`, the bodies of `if`, `while`, `until`,
`for` and `case`, or a function's body; after a wrapper (`exec`, `env`, `nice`,
`timeout`, ...) it is the command the wrapper runs. Values are read as values, their
words never commands: arithmetic (`$((RANDOM % 2))`, `(( N > 1 ))`, a `for ((...))`'s
header), an array's (`arr=(a b)`) and a `[[ ... ]]` test; only the command
substitutions in them (`$(( $(nproc) * 2 ))`) run. An interpreter's (`python3`,
`bash`, `node`, ...) first argument that is not an option is the script it runs,
unless an option gives the program inline (`bash -lc '...'`, `python3 -m pkg`).
Never a command: the other arguments, a redirection's target, a `case`'s subject
and patterns (`T1/s1|T1/s2)`), a `for`'s words. A line bash could not parse
(unbalanced quotes) runs nothing here: bash will say so itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

# bash's operators, longest first (shlex returns a run of these characters as one word).
_OPERATORS = sorted(
    ["&&", "||", ";;&", ";;", ";&", "|&", ";", "&", "|", "(", ")", "\n",
     "<<<", "<<-", "<<", ">>", ">&", "<&", "&>>", "&>", "<>", ">|", "<", ">"],
    key=len, reverse=True,
)  # fmt: skip
_PUNCTUATION = "();<>|&\n"
# After one of these the next word is a command again.
_SEPARATORS = {";", "&", "&&", "|", "||", "|&", "\n"}
_REDIRECTIONS = {"<", ">", ">>", ">&", "<&", "&>", "&>>", "<>", ">|", "<<<"}
# Reserved words after which a command comes; and those that close a compound command.
_OPENING = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
_CLOSING = {"fi", "done", "}", "esac"}
# Commands that run the command their arguments name, and their options with a value.
_WRAPPERS = {
    "exec": {"-a"}, "command": set(), "builtin": set(), "nohup": set(),
    "env": {"-u", "-C", "-S"}, "nice": {"-n"}, "timeout": {"-s", "-k"},
    "stdbuf": {"-i", "-o", "-e"},
}  # fmt: skip
# Interpreters, whose first argument that is not an option is the script they run,
# with the letters of a short option that gives the program inline (`bash -lc '...'`,
# `python3 -m pkg`) instead, and the options that take a value.
_INTERPRETERS = {
    re.compile(r"(python|pypy)[0-9.]*"): "cm",
    re.compile(r"bash|sh|dash|zsh|ksh"): "c",
    re.compile(r"node|nodejs|bun|tsx|ts-node"): "ep",
    re.compile(r"ruby|perl|Rscript"): "eE",
    re.compile(r"php"): "r",
}
_INLINE_LONG_OPTIONS = {"--eval", "--print", "--command"}
_INTERPRETER_VALUE_OPTIONS = {"-W", "-X", "-Q", "-r", "--require", "-I", "-o", "-O", "+O"}


def runs_of(command: str) -> list[Run]:
    """What `command` runs, in order: each command word, and each interpreter's script."""
    return _Reader().read(_words(command))


def words_of(command: str) -> list[str]:
    """`command`'s words and operators as bash splits them (quotes removed); none when
    bash would not parse it."""
    return _words(command)


def _words(command: str) -> list[str]:
    """`command`'s words and operators as bash splits them (quotes removed), with its
    comments and here-documents' bodies left out; none when bash would not parse it."""
    text = _values_reduced(_uncommented(command))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace = " \t\r"  # a newline ends a command
    lexer.commenters = ""  # done by _uncommented, which keeps the newline
    lexer.whitespace_split = True
    try:
        return [part for word in lexer for part in _split_operators(word)]
    except ValueError:  # unbalanced quotes: bash will say so itself
        return []


def _split_operators(word: str) -> list[str]:
    if word.strip(_PUNCTUATION):
        return [word]
    parts = []
    while word:
        operator = next((op for op in _OPERATORS if word.startswith(op)), word[0])
        parts.append(operator)
        word = word[len(operator) :]
    return parts


def _uncommented(command: str) -> str:
    """`command` without its comments (from an unquoted `#` that starts a word to the
    end of its line) and without the bodies of its here-documents."""
    heredocs: list[tuple[str, bool]] = []

    def unquoted(i: int, out: list[str]) -> tuple[str, int] | None:
        nonlocal heredocs
        char = command[i]
        if char == "#" and (not out or out[-1][-1:] in _WORD_START):
            end = command.find("\n", i)
            return "", len(command) if end < 0 else end
        if command.startswith("<<", i) and not command.startswith("<<<", i):
            found = re.match(r"<<(-?)\s*(['\"]?)([^\s'\";&|<>()]+)\2", command[i:])
            if found:
                heredocs.append((found.group(3), found.group(1) == "-"))
        elif char == "\n" and heredocs:
            after = _after_heredocs(command, i + 1, heredocs)
            heredocs = []
            return char, after
        return None

    return _rewritten(command, unquoted)


def _rewritten(command: str, unquoted: Callable[[int, list[str]], tuple[str, int] | None]) -> str:
    """`command` with what `unquoted` gives, at a character outside quotes and escapes,
    written in place of what it skips (the text, and the index to go on from; None
    keeps the character); quotes and escapes as they are. `unquoted` sees what was
    written so far, to tell whether the character starts a word."""
    out: list[str] = []
    quote, i = "", 0
    while i < len(command):
        char = command[i]
        if quote:
            if char == "\\" and quote == '"':
                out.append(command[i : i + 2])
                i += 2
                continue
            quote = "" if char == quote else quote
        elif char == "\\":
            out.append(command[i : i + 2])
            i += 2
            continue
        elif char in "'\"":
            quote = char
        elif (instead := unquoted(i, out)) is not None:
            if instead[0]:
                out.append(instead[0])
            i = instead[1]
            continue
        out.append(char)
        i += 1
    return "".join(out)


# A word that starts an array's value (`arr=(`, `arr+=(`, `declare -A m=(`).
_ARRAY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=\(")
# What may stand before a word (as in _uncommented): its start.
_WORD_START = " \t\n;&|()"
# Where `]]` ends a `[[ ... ]]` test: a word of its own.
_TEST_END = re.compile(r"(?<=[ \t\n])\]\](?=[ \t\n;&|)]|$)")


def _values_reduced(command: str) -> str:
    """`command` with each value whose words bash never runs (arithmetic, an array's
    value, a `[[ ... ]]` test) reduced to the command substitutions in it, which do run:
    `n=$((1+2))` reads as `n=$_`, `(( $(nproc) > 1 ))` as `$(nproc)`, `arr=(a b)` as
    `arr=`, `[[ -f x || $(t) ]]` as `[[ $(t) ]]`. The rest is kept as it is."""
    return _rewritten(
        command,
        lambda i, out: _value_at(command, i, at_word_start=not out or out[-1][-1:] in _WORD_START),
    )


def _value_at(command: str, i: int, at_word_start: bool) -> tuple[str, int] | None:
    """The value that starts at `command[i]` (unquoted), reduced, and where it ends;
    None when none starts there."""
    if command.startswith("$((", i):
        end = _arithmetic_end(command, i + 3)
        if end is not None:  # `$_`: a word whose value only a run knows
            return "".join(_substitutions(command[i + 3 : end - 2])) or "$_", end
    elif command.startswith("((", i):  # `(( ... ))` and `for (( ... ))`; `((cd x); y)` is not
        end = _arithmetic_end(command, i + 2)
        if end is not None:
            return " ".join(["", *_substitutions(command[i + 2 : end - 2]), ""]), end
    elif at_word_start and (array := _ARRAY.match(command, i)):
        end = _closing(command, array.end())
        if end is not None:
            return array.group(1) + "=" + "".join(_substitutions(command[array.end() : end])), end
    elif at_word_start and re.match(r"\[\[[ \t\n]", command[i : i + 3]):
        test_end = _TEST_END.search(command, i + 2)
        if test_end is not None:
            inner = _substitutions(command[i + 2 : test_end.start()])
            return " ".join(["[[", *inner, "]]"]), test_end.end()
    return None


def _arithmetic_end(command: str, start: int) -> int | None:
    """Where arithmetic whose `((` ends just before `start` ends: after the `)` that
    closes its second `(`, when a `)` follows it at once (bash's own rule; else, as in
    `((cd x) ; y)`, the parentheses are subshells)."""
    end = _closing(command, start)
    return end + 1 if end is not None and command[end : end + 1] == ")" else None


def _closing(command: str, start: int) -> int | None:
    """Where the `(` just before `start` is closed (after its `)`), the parentheses in
    quotes left out; None when it is not."""
    depth = 1
    for i in _unquoted(command, start):
        if command[i] in "()":
            depth += 1 if command[i] == "(" else -1
            if not depth:
                return i + 1
    return None


def _substitutions(value: str) -> list[str]:
    """The command substitutions (`$(...)`, unquoted) in `value`, each reduced in turn."""
    found, after = [], 0
    for i in _unquoted(value):
        if i >= after and value.startswith("$(", i) and not value.startswith("$((", i):
            end = _closing(value, i + 2)
            if end is not None:
                found.append(_values_reduced(value[i:end]))
                after = end  # what it holds was reduced with it
    return found


def _unquoted(text: str, start: int = 0) -> Iterator[int]:
    """The indices from `start` of the characters of `text` that are neither quoted nor
    escaped (a quote that opens or closes is neither)."""
    quote, i = "", start
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote == '"':
                i += 1
            quote = "" if char == quote else quote
        elif char == "\\":
            i += 1
        elif char in "'\"":
            quote = char
        else:
            yield i
        i += 1


def _after_heredocs(command: str, start: int, heredocs: list[tuple[str, bool]]) -> int:
    """Where the command goes on after the bodies of `heredocs`, which start at `start`."""
    lines = command[start:].split("\n")
    position, waiting = start, list(heredocs)
    for line in lines:
        position += len(line) + 1
        delimiter, tabs = waiting[0]
        if (line.lstrip("\t") if tabs else line) == delimiter:
            waiting.pop(0)
            if not waiting:
                return min(position, len(command))
    return len(command)


@dataclass(frozen=True)
class Run:
    """A file a command runs: the command word itself (`program`), or the script an
    interpreter is given."""

    word: str
    program: bool


@dataclass
class _Context:
    """An open construct: a subshell `(`, a command substitution `$(` (the command it
    sits in goes on after it), or a `case` (in its patterns, or in a clause's body)."""

    kind: str
    words: list[str] = field(default_factory=list)
    state: str = "command"


@dataclass
class _Reader:
    """Walks a command's words as bash reads them and keeps what each simple command
    runs. `state` is what the next word is: "command" (a command word, a reserved
    word or an assignment may come), "arguments" (of the simple command in `words`),
    "target" (of a redirection), "compound" (after `fi`, `done`, `)`...: only
    redirections and operators), "skipped" (a `for`'s words), "subject" and
    "subject-in" (a `case`'s word, then its `in`), "definition" (`name()`)."""

    runs: list[Run] = field(default_factory=list)
    stack: list[_Context] = field(default_factory=list)
    state: str = "command"
    words: list[str] = field(default_factory=list)  # the simple command so far
    resume: str = "command"  # the state after a redirection's target

    def read(self, words: list[str]) -> list[Run]:
        for index, word in enumerate(words):
            following = words[index + 1] if index + 1 < len(words) else ""
            previous = words[index - 1] if index else ""
            self._word(word, previous, following)
        self._end_command()
        return self.runs

    def _word(self, word: str, previous: str, following: str) -> None:
        if self.state == "target":
            self.state = self.resume
        elif word in _REDIRECTIONS or word in ("<<", "<<-"):
            self.resume, self.state = self.state, "target"
        elif word.isdigit() and following in _REDIRECTIONS:
            pass  # the file descriptor of `2>&1`
        elif self.stack and self.stack[-1].kind == "case":
            self._pattern(word)
        elif word in _SEPARATORS:
            self._end_command()
            if self.state != "subject-in":  # `case WORD` and its `in` may be lines apart
                self.state = "command"
        elif word in (";;", ";&", ";;&"):
            self._end_command()
            while self.stack and self.stack[-1].kind != "case-body":
                self.stack.pop()
            if self.stack:
                self.stack[-1].kind = "case"
        elif word == "(" and previous.endswith("$"):
            self.stack.append(_Context("$(", self.words, self.state))
            self.words, self.state = [], "command"
        elif word == "(" and following == ")":
            self.words, self.state = [], "definition"  # `name()`: a function's body follows
        elif word == ")" and self.state == "definition":
            self.state = "command"
        elif word == "(":
            self._end_command()
            self.stack.append(_Context("("))
            self.state = "command"
        elif word == ")":
            self._close()
        elif self.state == "subject":
            self.state = "subject-in"
        elif self.state == "subject-in":
            if word == "in":
                self.stack.append(_Context("case"))
        elif self.state == "command":
            self._command_word(word)
        elif self.state == "arguments":
            self.words.append(word)
        # "skipped" and "compound": nothing that runs

    def _close(self) -> None:
        self._end_command()
        context = self.stack.pop() if self.stack else _Context("(")
        if context.kind == "$(":  # the command around it goes on
            self.words, self.state = context.words, context.state
        else:
            self.state = "compound"

    def _pattern(self, word: str) -> None:
        """A case's pattern, up to its `)`; or the case's `esac`."""
        if word == "esac":
            self.stack.pop()
            self.state = "compound"
        elif word == ")":
            self.stack[-1].kind = "case-body"
            self.state = "command"

    def _command_word(self, word: str) -> None:
        if word in _OPENING:
            return
        if word in _CLOSING:
            if word == "esac":
                while self.stack and self.stack.pop().kind != "case-body":
                    pass
            self.state = "compound"
        elif word in ("for", "select"):
            self.state = "skipped"  # up to the `;` or newline before `do`
        elif word == "case":
            self.state = "subject"
        elif not _assignment(word):  # VAR=value before the command
            self.words, self.state = [word], "arguments"

    def _end_command(self) -> None:
        """The simple command that just ended: what it runs."""
        words, self.words = self.words, []
        while words and PurePosixPath(words[0]).name in _WRAPPERS:
            wrapper = PurePosixPath(words[0]).name
            if wrapper == "command" and any(w in ("-v", "-V") for w in words[1:2]):
                return  # `command -v NAME` looks NAME up: it runs nothing
            words = _past_options(words[1:], _WRAPPERS[wrapper])
            while wrapper == "env" and words and _assignment(words[0]):
                words = words[1:]
            if wrapper == "timeout":
                words = words[1:]  # its duration
        if not words or words[0] == "$":  # `$(...) args`: what runs is only known then
            return
        self.runs.append(Run(words[0], program=True))
        name = PurePosixPath(words[0]).name
        inline = next((v for k, v in _INTERPRETERS.items() if k.fullmatch(name)), None)
        if inline is None:
            return
        script = _past_options(words[1:], _INTERPRETER_VALUE_OPTIONS)
        options = words[1 : len(words) - len(script)]
        if script and not any(_inline(option, inline) for option in options):
            self.runs.append(Run(script[0], program=False))


def _inline(option: str, letters: str) -> bool:
    """Whether an interpreter's option gives its program inline rather than a script."""
    if option.startswith("--"):
        return option.split("=")[0] in _INLINE_LONG_OPTIONS
    return option == "-" or (option.startswith("-") and any(c in letters for c in option[1:]))


def _past_options(words: list[str], with_value: set[str]) -> list[str]:
    """`words` after the options at their head (and a `--` ending them)."""
    index = 0
    while index < len(words) and words[index].startswith(("-", "+")) and words[index] != "--":
        index += 2 if words[index] in with_value else 1
    if index < len(words) and words[index] == "--":
        index += 1
    return words[index:]


def _assignment(word: str) -> bool:
    """`VAR=value`, `VAR+=more` or `arr[i]=value`."""
    return re.match(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=", word) is not None
