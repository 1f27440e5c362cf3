"""scheduler.shellwords.runs_of: what a bash command line runs (its command words, and
the scripts interpreters are given), never its arguments."""

from __future__ import annotations

import pytest

from scheduler.shellwords import Run, runs_of


def program(word: str) -> Run:
    return Run(word, program=True)


def script(word: str) -> Run:
    return Run(word, program=False)


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        ("touch out.txt", [program("touch")]),
        ("./agent.py --fast x.txt", [program("./agent.py")]),
        ("python3 -u agent.py --quick", [program("python3"), script("agent.py")]),
        ("/usr/bin/env python3 agent.py", [program("python3"), script("agent.py")]),
        ("node --require hook.js agent.js", [program("node"), script("agent.js")]),
        ("sh -- run.sh", [program("sh"), script("run.sh")]),
        ("bash -e run.sh", [program("bash"), script("run.sh")]),  # -e: errexit
        ("python3 -m agent out.txt", [program("python3")]),
        ("bash -lc './x.sh'", [program("bash")]),
        ("env -i A=1 nice -n 5 timeout -s KILL 60 ./a.sh", [program("./a.sh")]),
        ("exec ./a.sh", [program("./a.sh")]),
        ("FLAG=./x my-agent", [program("my-agent")]),
        ("2>/dev/null ./a.sh", [program("./a.sh")]),
        ("x=$(./a.sh) ./b.sh", [program("./a.sh"), program("./b.sh")]),
        ("echo $(./c.sh) d.txt", [program("./c.sh"), program("echo")]),
        ("(cd x && ./a.sh) | ./b.sh > o.txt", [
            program("cd"), program("./a.sh"), program("./b.sh")]),
        ("{ ./g.sh; } && ! ./n.sh & time ./t.sh", [
            program("./g.sh"), program("./n.sh"), program("./t.sh")]),
        ("if ./c.sh; then ./ok.sh; elif x; then :; else ./ko.sh; fi", [
            program("./c.sh"), program("./ok.sh"), program("x"), program(":"), program("./ko.sh")]),
        ("while read l; do ./w.sh; done < in.txt; ./after.sh", [
            program("read"), program("./w.sh"), program("./after.sh")]),
        ("for f in a.sh b.sh; do ./each.sh $f; done > log 2>&1", [program("./each.sh")]),
        ("f() { ./in-func.sh; }; f", [program("./in-func.sh"), program("f")]),
        ('case "$T/$S" in T1/s1|T1/s2) k=1;; T1/s4) ./four.sh;; *) k=3;; esac; echo $k', [
            program("./four.sh"), program("echo")]),
        ("case $T in\n  (T1/s2) ./a.sh ;;\n  *) ./b.sh\nesac\n./c.sh", [
            program("./a.sh"), program("./b.sh"), program("./c.sh")]),
        ("case x\nin a) ./a.sh;; esac", [program("./a.sh")]),
        ("cat <<EOF > x.txt\nhello 'world\n./no.sh\nEOF\n./yes.sh", [
            program("cat"), program("./yes.sh")]),
        ("cat <<-'END'\n\t./no.sh\n\tEND\n./yes.sh", [program("cat"), program("./yes.sh")]),
        ("# ./no.sh\n./yes.sh # ./no.sh", [program("./yes.sh")]),
        ('echo "a # b" && ./yes.sh', [program("echo"), program("./yes.sh")]),
        ("echo 'unbalanced", []),
        # Values: arithmetic, arrays and tests run only the substitutions in them.
        ("echo $((RANDOM % 2))", [program("echo")]),
        ("n=$((1+2)); echo $n", [program("echo")]),
        ("echo $(((1+2)*3)) $(( (4) ))", [program("echo")]),
        ("(( EVALFLEET_RUN_INDEX > 1 )) && touch out.txt", [program("touch")]),
        ("for ((i=0; i<3; i++)); do ./each.sh; done", [program("./each.sh")]),
        ("arr=(a b c); echo ${arr[0]}", [program("echo")]),
        ("arr+=(d 'e f') m[k]=v; declare -a x=(g h) && ./go.sh", [
            program("declare"), program("./go.sh")]),
        ("[[ -n $A && -f x || $B =~ ^(c|d)$ ]] && ./t.sh", [program("[["), program("./t.sh")]),
        ("n=$(( $(nproc) * 2 )); x=( $(ls) ); if (( $(./c.sh) > 1 )); then ./b.sh; fi", [
            program("nproc"), program("ls"), program("./c.sh"), program("./b.sh")]),
        ("echo $(( $(./a.sh $((1+2))) ))", [program("./a.sh"), program("echo")]),
        # `((` or `$((` not closed by `))` at once: subshells, as bash reads them.
        ("((cd x && mytool) ; ./y.sh)", [program("cd"), program("mytool"), program("./y.sh")]),
        ("echo $((cd x && mytool) )", [program("cd"), program("mytool"), program("echo")]),
        ("echo $( (cd x && mytool) ) | bar", [
            program("cd"), program("mytool"), program("echo"), program("bar")]),
        ("$(./which.sh) --fast", [program("./which.sh")]),
        ("echo '$((x))' \"((y)) ./z.sh\" | arr=(./w.sh)", [program("echo")]),
    ],
)  # fmt: skip
def test_what_a_command_runs(command: str, runs: list[Run]) -> None:
    assert runs_of(command) == runs
