// The run table of the HTML report (scheduler/report/runs.py writes its data).
// Only the rows in view are in the DOM, so thousands of runs open and filter at
// once; a run's details are decompressed and laid out when it is opened.
// Every text from a run goes in as textContent, never as markup.
"use strict";
(() => {
  const OVERSCAN = 15; // rows drawn above and below the visible ones
  const COLUMNS = 8;
  const rows = JSON.parse(document.getElementById("runs-data").textContent);
  const scroller = document.getElementById("runs-scroll");
  const body = document.getElementById("runs-body");
  const count = document.getElementById("runs-count");
  const detail = document.getElementById("run-detail");
  const filters = [...document.querySelectorAll("#runs select[data-column]")];
  const opened = new Map(); // row -> Promise of its details
  let shown = rows.map((_, i) => i);
  let rowHeight = 0;
  let selected = -1;
  let pending = false;

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    Object.assign(node, props || {});
    for (const child of children.flat(Infinity)) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(child instanceof Node ? child : String(child));
      }
    }
    return node;
  }

  // --- the table ---------------------------------------------------------------------------

  function filter() {
    const wanted = filters.filter(f => f.value !== "").map(f => [Number(f.dataset.column), f.value]);
    shown = [];
    for (let i = 0; i < rows.length; i++) {
      if (wanted.every(([column, value]) => String(rows[i][column]) === value)) shown.push(i);
    }
    count.textContent = `${shown.length} of ${rows.length} runs`;
    scroller.scrollTop = 0;
    draw();
  }

  function spacer(height) {
    const td = el("td", {colSpan: COLUMNS});
    const tr = el("tr", {className: "spacer"}, td);
    tr.style.height = `${height}px`;
    return tr;
  }

  function rowElement(i) {
    const [tier, scenario, index, outcome, reason, cost, duration, judge] = rows[i];
    const tr = el(
      "tr",
      {className: `run ${outcome}${i === selected ? " selected" : ""}`, tabIndex: 0},
      el("td", {className: "label", title: tier}, tier),
      el("td", {className: "label", title: scenario}, scenario),
      el("td", {}, index),
      el("td", {className: `label outcome ${outcome}`}, outcome),
      el("td", {className: "label", title: reason}, reason),
      el("td", {}, cost),
      el("td", {}, duration),
      el("td", {}, judge),
    );
    tr.dataset.row = i;
    return tr;
  }

  function draw() {
    const height = rowHeight || 24;
    const top = Math.max(0, scroller.scrollTop - body.offsetTop);
    const first = Math.max(0, Math.floor(top / height) - OVERSCAN);
    const last = Math.min(shown.length, Math.ceil((top + scroller.clientHeight) / height) + OVERSCAN);
    const parts = [spacer(first * height)];
    for (let k = first; k < last; k++) parts.push(rowElement(shown[k]));
    parts.push(spacer((shown.length - last) * height));
    body.replaceChildren(...parts);
    if (!rowHeight && last > first) {
      // The real height of a row, once laid out: the spacers follow it.
      rowHeight = body.children[1].getBoundingClientRect().height || height;
      if (rowHeight !== height) draw();
    }
  }

  scroller.addEventListener("scroll", () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      draw();
    });
  });
  for (const select of filters) select.addEventListener("change", filter);
  // The summary of failure reasons: a click shows that reason's runs, and nothing else
  // (its link then scrolls to the table).
  for (const link of document.querySelectorAll("a.reason-filter")) {
    link.addEventListener("click", () => {
      for (const select of filters) select.value = select.name === "reason" ? link.dataset.reason : "";
      filter();
    });
  }
  body.addEventListener("click", event => {
    const tr = event.target.closest("tr.run");
    if (tr) open(Number(tr.dataset.row));
  });
  body.addEventListener("keydown", event => {
    const tr = event.target.closest("tr.run");
    if (tr && event.key === "Enter") open(Number(tr.dataset.row));
  });

  // --- one run -----------------------------------------------------------------------------

  // A run's details: its result and note, and its evidence (another element) when the
  // page holds it. Each is base64 of zlib-compressed JSON.
  function details(i) {
    if (!opened.has(i)) {
      const evidence = document.getElementById(`evidence-${i}`);
      opened.set(i, Promise.all([
        inflate(document.getElementById(`run-${i}`)),
        evidence ? inflate(evidence) : null,
      ]).then(([run, kept]) => ({...run, evidence: kept})));
    }
    return opened.get(i);
  }

  function inflate(element) {
    const text = atob(element.textContent);
    const bytes = new Uint8Array(text.length);
    for (let k = 0; k < text.length; k++) bytes[k] = text.charCodeAt(k);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).text().then(JSON.parse);
  }

  async function open(i) {
    selected = i;
    // Marked in place, not redrawn: the row keeps the keyboard's focus.
    for (const tr of body.querySelectorAll("tr.run")) {
      tr.classList.toggle("selected", Number(tr.dataset.row) === i);
    }
    detail.hidden = false;
    delete detail.dataset.run;
    detail.replaceChildren(el("p", {}, `Opening ${rows[i][0]} · ${rows[i][1]} · run ${rows[i][2]}…`));
    let shownRun;
    try {
      if (typeof DecompressionStream === "undefined") {
        throw new Error("this browser cannot decompress it (DecompressionStream is missing)");
      }
      const run = await details(i);
      if (selected !== i) return;
      shownRun = run.run.run_id;
      detail.replaceChildren(...runView(rows[i], run.run, run.evidence, run.note));
    } catch (error) {
      detail.replaceChildren(el("p", {className: "error"}, `Cannot show this run: ${error.message}`));
    }
    detail.dataset.run = shownRun || "";
    detail.scrollIntoView({block: "nearest"});
  }

  function runView(row, run, evidence, note) {
    const [tier, scenario, index, outcome] = row;
    const parts = [
      el("h3", {}, `${tier} · ${scenario} · run ${index}: `,
        el("span", {className: `outcome ${outcome}`}, outcome)),
      facts(run, evidence),
    ];
    if (!evidence) {
      parts.push(el("p", {className: "note"}, note || "No evidence stored for this run (it ran " +
        "before evidence was kept, its evidence could not be stored, or it is in an artifacts " +
        "folder the machine that wrote this page could not read): its result is all there is."));
    }
    parts.push(...gates(run, evidence), ...verifier(run, evidence), ...judge(run, evidence),
      ...transcript(run, evidence));
    if (evidence) {
      parts.push(
        ...excerpt("stderr", evidence.stderr),
        ...excerpt("stdout", evidence.stdout),
        ...changes(evidence),
        ...attempts(evidence),
        ...cuts(evidence),
      );
    }
    return parts;
  }

  function facts(run, evidence) {
    const items = [
      ["run", run.run_id],
      ["status", run.status],
      ["reason", run.fail_reason],
      ["limit", run.limit],
      ["exit code", run.exit_code],
      ["worker", run.worker],
      ["deliveries", run.attempts],
      ["model", run.model],
      ["cost", run.cost_usd === null ? run.cost_unknown_reason || "unknown" : dollars(run.cost_usd)],
      ["judge cost", run.judge_cost_usd === null ? null : dollars(run.judge_cost_usd)],
      ["duration", duration(run.duration_seconds)],
      ["tokens", `${tokens(run.input_tokens)} in, ${tokens(run.output_tokens)} out, ` +
        `${tokens(run.cache_read_tokens)} cache read, ` +
        `${tokens(run.cache_write_tokens)} cache write (${plural(run.llm_calls.length, "LLM call")})`],
      ["composite score", fixed(run.composite_score, 3)],
      ["outages", run.outages.length ? run.outages.join("; ") : null],
    ];
    if (evidence && Object.keys(evidence.phases).length) {
      const phases = Object.entries(evidence.phases).map(([p, s]) => `${p} ${fixed(s, 1)} s`);
      items.push(["phases", phases.join(", ")]);
    }
    return el("dl", {className: "facts"}, items
      .filter(([, value]) => value !== null && value !== undefined && value !== "")
      .map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  }

  function gates(run, evidence) {
    const seen = evidence ? evidence.gates : [];
    const count = Math.max(run.gates.length, seen.length);
    if (!count) return [];
    const items = [];
    for (let k = 0; k < count; k++) {
      const verdict = run.gates[k];
      const ran = seen[k];
      const passed = verdict ? verdict.passed : null;
      const name = verdict ? verdict.name || verdict.gate_type : `gate ${k + 1}`;
      const mark = passed === null ? "?" : passed ? "✓" : "✗";
      items.push(el("li", {className: passed === null ? "gate" : `gate ${passed ? "pass" : "fail"}`},
        el("p", {}, el("strong", {}, `${mark} ${name}`), verdict ? `: ${verdict.message}` : ""),
        ran && ran.command !== null ? command(ran.command, ran.exit_code) : null,
        ran && ran.output.text ? text(ran.output) : null,
      ));
    }
    return [
      el("h4", {}, `Gates: ${run.gates_passed} of ${run.gates_total} passed`),
      el("ul", {className: "gates"}, items),
    ];
  }

  // A benchmark task's verifier: its rewards (the reason says why there are none), what
  // it ran and printed.
  function verifier(run, evidence) {
    const ran = evidence ? evidence.verifier : null;
    if (!ran) return [];
    const rewards = Object.entries(run.rewards).map(([name, value]) => `${name} ${value}`);
    return [
      el("h4", {}, `Verifier: ${rewards.length ? rewards.join(", ") : "no rewards"}`),
      ran.command !== null ? command(ran.command, ran.exit_code) : null,
      ran.output.text ? text(ran.output) : null,
    ].filter((part) => part !== null);
  }

  // The run's own judge result first (a rejudged version's is its own), the judge
  // calls the evidence kept where the result has no answer.
  function judge(run, evidence) {
    const result = run.judge;
    const calls = evidence && evidence.judge ? evidence.judge.calls : [];
    if (!result && !calls.length) return [];
    const parts = [el("h4", {}, "Judge")];
    if (result) {
      parts.push(el("p", {},
        `${result.model}: score ${fixed(result.weighted_score, 3)} ` +
        `(passes at ${fixed(result.pass_threshold, 2)}): ${result.passed ? "passed" : "not passed"}`,
        result.error ? ` (error: ${result.error})` : ""));
    }
    const answer = result && result.response ? result.response : calls[0] || {};
    const scores = answer.scores || {};
    const reasons = answer.reasons || {};
    const criteria = [...new Set([...Object.keys(scores), ...Object.keys(reasons)])];
    if (criteria.length) {
      parts.push(el("table", {className: "criteria"},
        el("thead", {}, el("tr", {}, el("th", {className: "label"}, "criterion"),
          el("th", {}, "score"), el("th", {className: "label"}, "reason"))),
        el("tbody", {}, criteria.map(c => el("tr", {},
          el("td", {className: "label"}, c), el("td", {}, fixed(scores[c], 2)),
          el("td", {className: "label wrap"}, reasons[c] || ""))))));
    }
    const each = result ? result.scores : calls.map(call => call.weighted_score);
    if (each.length > 1) {
      const spread = result && result.scores_sd !== null ? `, sd ${fixed(result.scores_sd, 3)}` : "";
      const cached = result && result.cached ? `, ${result.cached} from the judgment cache` : "";
      parts.push(el("p", {},
        `${each.length} judgments: ${each.map(v => fixed(v, 3)).join(", ")}${spread}${cached}`));
    }
    for (const [label, list] of [["issues", answer.issues], ["highlights", answer.highlights]]) {
      if (list && list.length) parts.push(el("p", {}, el("strong", {}, `${label}: `), list.join("; ")));
    }
    return parts;
  }

  function transcript(run, evidence) {
    const events = evidence ? evidence.events : [];
    const parts = [];
    if (events.length) {
      parts.push(el("ol", {className: "conversation"}, events.map(eventView)));
    } else if (run.llm_calls.length) {
      parts.push(el("ol", {className: "conversation"}, run.llm_calls.map(call =>
        el("li", {className: "llm"}, usage(call)))));
    }
    if (evidence && evidence.transcript.text) {
      parts.push(el("details", {},
        el("summary", {}, `raw transcript (${size(evidence.transcript)})`), text(evidence.transcript)));
    }
    return parts.length ? [el("h4", {}, "Transcript"), ...parts] : [];
  }

  // An event as the evidence keeps it: an LLM call with its tokens, a tool call with its
  // command and exit code, a message, where a cap left events out; anything else as its
  // fields.
  function eventView(event) {
    const kind = String(event.type || event.kind || "event");
    const message = event.text ?? event.content ?? event.message;
    if (kind === "cut") {
      return el("li", {className: "cut"}, `[… ${event.events} events left out in the middle …]`);
    }
    const said = typeof message === "string" ? message : JSON.stringify(message);
    if (event.command !== undefined && event.command !== null) {
      const output = event.output;
      return el("li", {className: `tool${event.exit_code ? " fail" : ""}`},
        command(event.command, event.exit_code),
        output ? text(typeof output === "string" ? {text: output} : output) : null);
    }
    if ("input_tokens" in event || "output_tokens" in event) {
      return el("li", {className: "llm"}, usage(event), message ? el("p", {}, said) : null);
    }
    if (message !== undefined && message !== null) {
      return el("li", {className: "message"},
        event.role ? el("span", {className: "role"}, event.role) : null,
        el("div", {className: "said"}, said));
    }
    const rest = Object.entries(event).filter(([key]) => key !== "type" && key !== "kind");
    return el("li", {className: "other"}, el("span", {className: "role"}, kind),
      el("code", {}, JSON.stringify(Object.fromEntries(rest))));
  }

  function command(line, exitCode) {
    return el("p", {className: "command"}, el("code", {}, `$ ${line}`),
      exitCode === undefined || exitCode === null ? "" : ` → exit ${exitCode}`);
  }

  function usage(call) {
    const extra = [
      call.cache_read_tokens ? `${tokens(call.cache_read_tokens)} cache read` : "",
      call.model || "",
      call.latency_ms ? `${fixed(call.latency_ms / 1000, 1)} s` : "",
      call.tool_calls || call.tool_calls_made ?
        plural(call.tool_calls || call.tool_calls_made, "tool call") : "",
    ].filter(Boolean);
    return el("span", {className: "usage"},
      `LLM call: ${tokens(call.input_tokens)} in, ${tokens(call.output_tokens)} out` +
      (extra.length ? ` · ${extra.join(" · ")}` : ""));
  }

  function excerpt(title, value) {
    return value && value.text ? [el("h4", {}, `${title} (${size(value)})`), text(value)] : [];
  }

  function changes(evidence) {
    const parts = [];
    if (evidence.changes_summary) parts.push(el("pre", {}, evidence.changes_summary));
    if (evidence.patch.text) {
      parts.push(el("details", {},
        el("summary", {}, `patch (${size(evidence.patch)})`), text(evidence.patch)));
    }
    return parts.length ? [el("h4", {}, "Workspace changes"), ...parts] : [];
  }

  function attempts(evidence) {
    if (!evidence.attempts.length) return [];
    const head = ["worker", "started", "ended", "outcome"];
    return [el("h4", {}, "Attempts"), el("table", {className: "attempts"},
      el("thead", {}, el("tr", {}, head.map(h => el("th", {className: "label"}, h)))),
      el("tbody", {}, evidence.attempts.map(a => el("tr", {},
        el("td", {className: "label"}, a.worker), el("td", {className: "label"}, when(a.started_at)),
        el("td", {className: "label"}, a.ended_at === null ? "-" : when(a.ended_at)),
        el("td", {className: "label wrap"}, a.outcome)))))];
  }

  function cuts(evidence) {
    if (!evidence.cuts.length) return [];
    return [el("h4", {}, "Left out by the evidence caps"),
      el("ul", {className: "notes"}, evidence.cuts.map(c => el("li", {}, c)))];
  }

  // A cut text marks the cut in itself (core/evidence/caps.py); its size says how much.
  function text(value) {
    return el("pre", {}, value.text);
  }

  function size(value) {
    return bytes(value.total_bytes) + (value.cut ? `, ${bytes(value.cut)} of it cut` : "");
  }

  function fixed(value, digits) {
    if (value === null || value === undefined) return "-";
    return typeof value === "number" ? value.toFixed(digits) : String(value);
  }

  // As scheduler.report.formatting.duration writes it: a quick run in ms.
  function duration(seconds) {
    if (typeof seconds !== "number") return "-";
    return seconds < 1 ? `${(seconds * 1000).toFixed(0)} ms` : `${seconds.toFixed(1)} s`;
  }

  function dollars(value) {
    return `$${fixed(value, 4)}`;
  }

  function plural(count, noun) {
    return `${count} ${noun}${count === 1 ? "" : "s"}`;
  }

  function tokens(value) {
    return Number(value || 0).toLocaleString("en-US");
  }

  function bytes(value) {
    return value < 1024 ? `${value} B` : `${(value / 1024).toFixed(1)} KB`;
  }

  function when(seconds) {
    return `${new Date(seconds * 1000).toISOString().slice(0, 19).replace("T", " ")} UTC`;
  }

  filter();
})();
