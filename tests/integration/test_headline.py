"""The headline figures of every report format, end to end: stored runs in Redis, the CLI.

A tier where 7 of 10 counted runs passed (one more an infrastructure error,
one more cancelled) must read 0.700 with its Wilson interval in the table,
markdown, csv, html and `compare`; its median composite of 1.0 (grade A)
must come with a note that it hides three failures.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from scipy import stats

from core.results.run import RunStatus
from core.store import Store
from tests.conftest import PREFIX, SCHEDULER, run_cli
from tests.support.experiments import Cell, seed_experiment
from tests.support.html_pages import rendered_json
from tests.support.terminal import in_terminal

pytestmark = pytest.mark.integration

RUNS = 12
WILSON_7_10 = stats.binomtest(7, 10).proportion_ci(confidence_level=0.95, method="wilson")
SEVEN_OF_TEN = f"0.700 [{WILSON_7_10.low:.3f}, {WILSON_7_10.high:.3f}]"
HEADER = "pass rate (passes/counted) [95% CI]"
HIDDEN = (
    "T1: the median composite is 1.000 (grade A) although 3 of 10 counted runs failed; "
    "the mean composite is"
)
SECTIONS = (
    "Summary",
    "Confidence and significance against the baseline (T0)",
    "pass@k and pass^k",
    "Interaction metrics (mean per run)",
    "Guidance comparison: s",
    "Context growth per LLM call",
    "Seed metrics: T1",
)


def _cells() -> dict[tuple[str, str], Cell]:
    return {
        ("T0", "s"): Cell(tuple(i < 3 for i in range(RUNS))),
        # 7 of the 10 counted runs pass, each with composite 1.0; run 10 is an
        # infrastructure error, run 11 was cancelled: neither is counted.
        ("T1", "s"): Cell(
            tuple(i < 7 for i in range(RUNS)),
            statuses={10: RunStatus.infra_error, 11: RunStatus.cancelled},
            pass_impl=1.0,
        ),
        # Never passes: an infinite cost of pass, for the JSON of non-finite numbers.
        ("T2", "s"): Cell((False,) * RUNS),
    }


@pytest.fixture(scope="module")
def experiments(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    store = Store.from_url(redis_url, prefix=PREFIX)
    folder = tmp_path_factory.mktemp("matrices")
    return seed_experiment(store, folder, _cells()), seed_experiment(store, folder, _cells())


def _cli(env: dict[str, str], *args: str, columns: int | None = 200) -> str:
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    result = run_cli(*args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_seven_of_ten_reads_0_700_with_its_interval_in_every_format(
    experiments: tuple[str, str], fleet_env: dict[str, str]
) -> None:
    exp, other = experiments
    table = _cli(fleet_env, "report", exp, "--full")
    t1 = next(line for line in table.splitlines() if line.startswith("T1    (all)"))
    # runs counted, infra errors, cancelled, passes, then the headline pass rate.
    assert t1.split()[2:6] == ["10", "1", "1", "7"] and SEVEN_OF_TEN in t1
    assert "1 infrastructure error, 1 cancelled" in table.splitlines()[0]

    markdown = _cli(fleet_env, "report", exp, "--format", "markdown")
    assert f"| {HEADER} |" in markdown
    assert f"| T1 | (all) | 10 | 1 | 1 | 7 | {SEVEN_OF_TEN} | 1.000 / " in markdown
    assert re.search(r"\| 1\.000 / 0\.\d{3} \| A \| \+\d+\.\d% \|", markdown)

    rows = {
        (r["tier"], r["scenario"]): r
        for r in csv.DictReader(io.StringIO(_cli(fleet_env, "report", exp, "--format", "csv")))
    }
    t1_csv = rows["T1", ""]
    assert (t1_csv["counted"], t1_csv["errors"], t1_csv["cancelled"], t1_csv["passes"]) == (
        "10",
        "1",
        "1",
        "7",
    )
    assert t1_csv["runs"] == "12"  # the first release's columns keep their names
    assert float(t1_csv["pass_share"]) == pytest.approx(0.7)
    assert float(t1_csv["pass_share_ci_low"]) == pytest.approx(WILSON_7_10.low)
    assert float(t1_csv["pass_share_ci_high"]) == pytest.approx(WILSON_7_10.high)
    # ProjectScylla's statistic keeps its name and meaning: the median of 0/1 values.
    assert float(t1_csv["pass_rate_median"]) == 1.0

    page = _cli(fleet_env, "report", exp, "--format", "html")
    # The interval is wrapped in a span (it never breaks across lines); the cell reads the same.
    cells = re.sub(r"</?span[^>]*>", "", page)
    assert f"<th>{HEADER}</th>" in page and f"<td>{SEVEN_OF_TEN}</td>" in cells
    assert re.search(r'<rect class="bar" data-label="T1" data-value="0\.7"', page)

    for fmt in ("table", "markdown"):
        compared = _cli(fleet_env, "compare", other, exp, "--format", fmt)
        assert compared.count(SEVEN_OF_TEN) >= 2, compared  # A and B
        # The table wraps headings over lines; the others keep them whole.
        assert HEADER in compared or fmt == "table"
        assert "(passes/counted)" in compared
        assert "10/10" in compared
    # Raw numbers in CSV, as the report's: the share and its interval, each a column.
    compared = _cli(fleet_env, "compare", other, exp, "--format", "csv")
    listed = {(r["tier"], r["scenario"]): r for r in csv.DictReader(io.StringIO(compared))}
    b = listed["T1", "(all)"]
    assert (b["passes"], b["runs"], float(b["pass_rate"])) == ("7", "10", 0.7)
    assert float(b["pass_rate_ci_low"]) == pytest.approx(WILSON_7_10.low)
    assert float(b["pass_rate_ci_high"]) == pytest.approx(WILSON_7_10.high)


def test_compare_prints_its_title_once(
    experiments: tuple[str, str], fleet_env: dict[str, str]
) -> None:
    exp, other = experiments
    for fmt in ("table", "markdown"):
        compared = _cli(fleet_env, "compare", other, exp, "--format", fmt)
        assert compared.count(f"against demo ({other})") == 1, compared


def test_a_median_that_hides_failures_is_said_in_every_format(
    experiments: tuple[str, str], fleet_env: dict[str, str]
) -> None:
    exp = experiments[0]
    for fmt in ("table", "markdown", "html"):
        text = html.unescape(_cli(fleet_env, "report", exp, "--format", fmt, "--full", columns=400))
        assert HIDDEN in text, fmt
        assert "uplift = (the tier's median composite - the baseline's)" in text
        # T0's median composite is not the best possible: no note for it.
        assert "T0: the median composite" not in text


def _lines(text: str) -> list[str]:
    return text.rstrip("\n").splitlines()


def test_the_table_fits_the_terminal_and_shows_every_section(
    experiments: tuple[str, str], fleet_env: dict[str, str]
) -> None:
    exp = experiments[0]
    markdown = _cli(fleet_env, "report", exp, "--format", "markdown")
    assert [t for t in SECTIONS if f"## {t}" not in markdown] == []
    for columns in (80, 100):
        table = _cli(fleet_env, "report", exp, "--full", columns=columns)
        assert max(map(len, _lines(table))) <= columns
        assert "…" not in table  # columns go on below rather than being cut
        assert [t for t in SECTIONS if t not in table] == []
        assert SEVEN_OF_TEN in table
        assert f"left out at {columns} columns: duration (median)" in table
    wide = _cli(fleet_env, "report", exp, "--full", columns=250)
    assert max(map(len, _lines(wide))) > 160 and "left out" not in wide
    assert "duration" in wide and "(continued)" not in wide
    # Not a terminal and no COLUMNS: 120 columns.
    piped = _cli(fleet_env, "report", exp, "--full", columns=None)
    assert 100 < max(map(len, _lines(piped))) <= 120


def test_the_table_takes_the_width_of_the_terminal_it_is_shown_in(
    experiments: tuple[str, str], fleet_env: dict[str, str]
) -> None:
    exp = experiments[0]
    env = {k: v for k, v in fleet_env.items() if k not in ("COLUMNS", "LINES")}
    printed = in_terminal([SCHEDULER, "report", exp, "--full"], env, rows=50, columns=90)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", printed)
    lines = shown.replace("\r\n", "\n").rstrip("\n").splitlines()
    assert SEVEN_OF_TEN in shown
    assert max(map(len, lines)) <= 90 and "left out at 90 columns" in shown


def _jq(document: str, program: str) -> str:
    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("no jq on PATH")
    result = subprocess.run(
        [jq, "-c", program], input=document, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_json_nonfinite_null_gives_strict_json_for_jq(
    command: str, experiments: tuple[str, str], fleet_env: dict[str, str]
) -> None:
    exp, other = experiments
    args = (
        (command, exp, "--format", "json")
        if command == "report"
        else (command, other, exp, "--format", "json")
    )
    as_strings = _cli(fleet_env, *args)
    as_null = _cli(fleet_env, *args, "--json-nonfinite", "null")
    # Exactly one JSON document on stdout, either way.
    assert _jq(as_strings, "") and _jq(as_null, "")
    assert (
        subprocess.run(
            ["jq", "-s", "length"], input=as_null, capture_output=True, text=True
        ).stdout.strip()
        == "1"
    )

    def nonfinite_to_null(value: object) -> object:
        if isinstance(value, dict):
            return {k: nonfinite_to_null(v) for k, v in value.items()}
        if isinstance(value, list):
            return [nonfinite_to_null(v) for v in value]
        return None if value in ("Infinity", "NaN") else value

    # The same document, Infinity and NaN written as null and nothing else changed.
    assert json.loads(as_null) == nonfinite_to_null(json.loads(as_strings))
    assert '"Infinity"' not in as_null and '"NaN"' not in as_null
    if command == "report":
        assert json.loads(as_strings)["tiers"]["T2"]["cost_of_pass"] == "Infinity"
        assert _jq(as_null, ".tiers.T2.cost_of_pass") == "null"
        assert _jq(as_null, ".tiers.T1.cost_of_pass * 1 > 0") == "true"

    bad = run_cli(*args, "--json-nonfinite", "zero", env=fleet_env)
    assert bad.returncode == 2 and "--json-nonfinite" in bad.stderr


def test_the_readmes_jq_line_gives_each_tiers_pass_rate_even_one_without_counted_runs(
    store: Store, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    """The README's `... --json-nonfinite null | jq ...` one-liner, run as written: jq
    ended with exit 5 ("cannot be divided because the divisor is zero") on a tier whose
    every run was an infrastructure error."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(line for line in readme.splitlines() if "--json-nonfinite null | jq" in line)
    report, program = line.split(" | jq ")
    cells = {
        ("T0", "s"): Cell((True, False, False, False)),
        ("T1", "s"): Cell((False,) * 4, statuses=dict.fromkeys(range(4), RunStatus.infra_error)),
    }
    exp = seed_experiment(store, tmp_path, cells)
    document = _cli(fleet_env, *shlex.split(report.replace("EXP", exp))[1:])
    assert json.loads(_jq(document, shlex.split(program)[0])) == {"T0": 0.25, "T1": None}


# Appended by the test only: it reads what Chromium laid out.
_READ = """<script>
const rows = document.querySelector("section#summary table").rows;
const bars = [...document.querySelectorAll("#pass-rate rect.bar")];
const out = document.createElement("pre");
out.id = "read";
out.textContent = JSON.stringify({
  header: [...rows[0].cells].map(c => c.innerText),
  rows: [...rows].slice(1).map(r => [...r.cells].map(c => c.innerText)),
  bars: bars.map(b => ({label: b.dataset.label, height: b.getBoundingClientRect().height})),
});
document.body.appendChild(out);
</script>"""


def test_html_summary_reads_0_700_in_headless_chromium(
    experiments: tuple[str, str], fleet_env: dict[str, str], tmp_path: Path
) -> None:
    page = _cli(fleet_env, "report", experiments[0], "--format", "html")
    read = rendered_json(page, _READ, "read", tmp_path)
    column = read["header"].index(HEADER)
    t1 = next(r for r in read["rows"] if r[:2] == ["T1", "(all)"])
    assert t1[column] == SEVEN_OF_TEN
    bars = {b["label"]: b["height"] for b in read["bars"]}
    # The chart shows the same share: 7/10 against T0's 3/12.
    assert bars["T1"] / bars["T0"] == pytest.approx(0.7 / 0.25, rel=0.03)
