"""Layer 3 of the evaluation seed: a rubric-driven LLM judge over plain HTTP.

Two protocols: ``openai`` (POST {base_url}/chat/completions) and ``anthropic``
(POST {base_url}/messages). ``judge_run`` never raises; when no usable answer
can be had, the JudgeResult carries ``error`` and the caller marks the run an
infrastructure error.

Retry policy (``config.max_attempts`` = N):
- up to N answers are asked for; an answer that is not valid is asked for
  again with a reminder of the exact format and what was wrong;
- each of those requests is tried up to N times on 429, 5xx, timeouts and
  connection errors, waiting ``Retry-After`` when the server sends one, else
  1, 2, 4, ... s (always capped at ``MAX_WAIT_S``). Other HTTP errors (401,
  404, ...) are not retried.
So at most N*N requests are made; ``JudgeResult.attempts`` counts them.

Answer validation: every rubric criterion needs a score in [0, 1]; scores for
ids not in the rubric are tolerated, kept in the response and ignored by the
weighted score, which is recomputed from the rubric weights (the judge's own
figure is kept as ``reported_weighted_score``).

The API key goes into a request header and nowhere else: it is redacted from
every error message, and nothing here logs it.
"""

from __future__ import annotations

import email.utils
import functools
import json
import logging
import math
import re
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import certifi
import httpx
from pydantic import ValidationError

from core.config import JudgeConfig, ModelPrice, Rubric, ScenarioJudge
from core.results import GateResult, JudgeResponse, JudgeResult

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
FIRST_BACKOFF_S = 1.0
ANTHROPIC_VERSION = "2023-06-01"
MAX_ERROR_BODY_CHARS = 200

SYSTEM_PROMPT = (
    "You are a strict, impartial evaluator of an AI agent's work on a command-line task. "
    "Judge only from the evidence given. Answer with a single JSON object and nothing else."
)


def judge_run(
    config: JudgeConfig,
    scenario: ScenarioJudge,
    rubric: Rubric,
    *,
    task_prompt: str,
    transcript_text: str,
    gates: Sequence[GateResult],
    changes_summary: str,
    api_key: str | None,
    price: ModelPrice | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> JudgeResult:
    """Ask the judge model to score a run against the rubric."""
    if config.api_key_env is not None and not api_key:
        return JudgeResult(
            model=config.model,
            pass_threshold=scenario.pass_threshold,
            error=f"environment variable {config.api_key_env} is not set",
        )
    prompt = build_prompt(config, rubric, task_prompt, transcript_text, gates, changes_summary)
    with _Session(config, api_key, sleep) as session:
        response, error = _ask_until_valid(session, config.max_attempts, prompt, rubric)
    weighted = None if response is None else weighted_score(response, rubric)
    cost = None
    if price is not None:
        cost = (session.input_tokens * price.input + session.output_tokens * price.output) / 1e6
    return JudgeResult(
        model=config.model,
        response=response,
        weighted_score=weighted,
        reported_weighted_score=None if response is None else response.weighted_score,
        pass_threshold=scenario.pass_threshold,
        # The epsilon keeps 0.7 from failing a 0.7 threshold as 0.69999999.
        passed=weighted is not None and weighted >= scenario.pass_threshold - 1e-9,
        attempts=session.requests,
        error=None if error is None else _redact(error, api_key),
        input_tokens=session.input_tokens,
        output_tokens=session.output_tokens,
        cost_usd=cost,
        latency_ms=session.latency_ms,
    )


def weighted_score(response: JudgeResponse, rubric: Rubric) -> float:
    """sum(score_i * w_i) / sum(w_i) over the rubric's criteria."""
    total = sum(c.weight for c in rubric.criteria)
    return sum(response.scores[c.id] * c.weight for c in rubric.criteria) / total


def _ask_until_valid(
    session: _Session, max_answers: int, prompt: str, rubric: Rubric
) -> tuple[JudgeResponse | None, str | None]:
    messages = [{"role": "user", "content": prompt}]
    problem = ""
    try:
        for _ in range(max_answers):
            text, problem = session.ask(messages)
            if text is None:
                continue  # nothing the model said to correct: ask the same again
            try:
                return parse_answer(text, rubric), None
            except AnswerError as exc:
                problem = str(exc)
                messages = [
                    *messages,
                    {"role": "assistant", "content": text or "(empty answer)"},
                    {"role": "user", "content": _reminder(problem, rubric)},
                ]
    except _GaveUp as exc:
        return None, str(exc)
    return None, f"malformed answer after {max_answers} attempts: {problem}"


# --- the prompt -------------------------------------------------------------------------------


def build_prompt(
    config: JudgeConfig,
    rubric: Rubric,
    task_prompt: str,
    transcript_text: str,
    gates: Sequence[GateResult],
    changes_summary: str,
) -> str:
    criteria = "\n".join(
        f"- {c.id} (weight {c.weight:g}): {c.description}" for c in rubric.criteria
    )
    gate_lines = "\n".join(
        f"- {'PASS' if g.passed else 'FAIL'} {g.gate_type}"
        + (f" {g.name!r}" if g.name else "")
        + f": {g.message}"
        for g in gates
    )
    return "\n\n".join(
        [
            "# Task given to the agent\n" + task_prompt.strip(),
            "# Rubric\nScore each criterion from 0.0 (not met at all) to 1.0 (fully met).\n"
            + criteria,
            "# Deterministic checks already run (gates)\n" + (gate_lines or "(none)"),
            "# Workspace changes\n" + (changes_summary.strip() or "(none)"),
            "# Transcript of the agent's session\n"
            + clip_middle(transcript_text, config.max_transcript_chars),
            "# Answer format\n" + answer_format(rubric),
        ]
    )


def answer_format(rubric: Rubric) -> str:
    scores = ", ".join(f'"{c.id}": <number 0-1>' for c in rubric.criteria)
    text = (
        "Reply with only this JSON object (no prose, no code fences):\n"
        f'{{"scores": {{{scores}}}, "weighted_score": <number 0-1, the weighted mean of the '
        'scores>, "confidence": <number 0-1>, "issues": [<string>, ...], '
        '"highlights": [<string>, ...]}'
    )
    extra = [f for f in rubric.output.require_fields if f not in JudgeResponse.model_fields]
    if extra:
        text += "\nAlso include these fields: " + ", ".join(extra)
    return text


def clip_middle(text: str, limit: int) -> str:
    """Head and tail of a long text, the middle replaced by a marker."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def _reminder(problem: str, rubric: Rubric) -> str:
    return (
        f"Your previous answer could not be used: {problem}.\n"
        "Answer again with only the JSON object, exactly in this format.\n" + answer_format(rubric)
    )


# --- the answer -------------------------------------------------------------------------------


class AnswerError(ValueError):
    """The judge's answer does not match the required format; the message says how."""


_FENCE = re.compile(r"^```[A-Za-z]*\s*(.*?)\s*```$", re.DOTALL)


def parse_answer(text: str, rubric: Rubric) -> JudgeResponse:
    data = _json_object(text)
    missing = [f for f in rubric.output.require_fields if f not in data]
    if missing:
        raise AnswerError("missing fields: " + ", ".join(missing))
    try:
        response = JudgeResponse.model_validate(data)
    except ValidationError as exc:
        raise AnswerError(
            "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        ) from None
    unscored = [c.id for c in rubric.criteria if c.id not in response.scores]
    if unscored:
        raise AnswerError("no score for criteria: " + ", ".join(unscored))
    out_of_range = [
        f"{c.id}={response.scores[c.id]}"
        for c in rubric.criteria
        if not (math.isfinite(response.scores[c.id]) and 0.0 <= response.scores[c.id] <= 1.0)
    ]
    if out_of_range:
        raise AnswerError("scores must be within [0, 1]: " + ", ".join(out_of_range))
    return response


def _json_object(text: str) -> dict[str, Any]:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        # Tolerate a sentence around the object; anything else is a real error.
        start, end = stripped.find("{"), stripped.rfind("}")
        try:
            data = json.loads(stripped[start : end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            data = None
        if data is None:
            raise AnswerError(f"answer is not valid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict):
        raise AnswerError(f"answer must be a JSON object, got {type(data).__name__}")
    return data


# --- HTTP -------------------------------------------------------------------------------------


class _GaveUp(Exception):
    """A request failed for good; the message is the JudgeResult error."""


@dataclass(frozen=True)
class _Retryable:
    """A failed try worth repeating, and how long to wait first."""

    reason: str
    detail: str
    wait_s: float


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~40 ms of CPU); one per process
    # instead of one per judge call.
    return ssl.create_default_context(cafile=certifi.where())


class _Session:
    """One judge call: an HTTP client, the retry policy and the running totals."""

    def __init__(self, config: JudgeConfig, api_key: str | None, sleep: Callable[[float], None]):
        self.config = config
        self.api_key = api_key
        self.sleep = sleep
        self.requests = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.latency_ms: float | None = None
        timeout = httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        self.client = httpx.Client(timeout=timeout, verify=_tls_context())

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def ask(self, messages: list[dict[str, str]]) -> tuple[str | None, str]:
        """(answer text, "") or (None, why the 2xx response was unusable)."""
        url, payload, headers = self._request(messages)
        tries = self.config.max_attempts
        for attempt in range(1, tries + 1):
            self.requests += 1
            started = time.monotonic()
            outcome = self._post(url, payload, headers, attempt)
            if isinstance(outcome, httpx.Response):
                elapsed = (time.monotonic() - started) * 1000
                self.latency_ms = (self.latency_ms or 0.0) + elapsed
                return self._read(outcome)
            failed = outcome
            if attempt < tries:
                log.warning(
                    "judge request failed (%s); retry in %.1f s",
                    _redact(failed.reason, self.api_key),
                    failed.wait_s,
                )
                self.sleep(failed.wait_s)
        detail = f": {failed.detail}" if failed.detail else ""
        raise _GaveUp(f"{failed.reason} after {tries} attempts{detail}")

    def _post(
        self, url: str, payload: dict[str, Any], headers: dict[str, str], attempt: int
    ) -> httpx.Response | _Retryable:
        """The 2xx response, or what went wrong in a way worth retrying."""
        backoff = min(FIRST_BACKOFF_S * 2 ** (attempt - 1), MAX_WAIT_S)
        try:
            response = self.client.post(url, json=payload, headers=headers)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise _GaveUp(f"judge base_url {self.config.base_url!r} is not usable: {exc}") from None
        except httpx.ConnectTimeout:
            limit = self.config.connect_timeout_s
            return _Retryable("connect timeout", f"no connection within {limit:g} s", backoff)
        except httpx.TimeoutException as exc:
            kind = {httpx.ReadTimeout: "read", httpx.WriteTimeout: "write"}.get(type(exc), "pool")
            limit = self.config.timeout_s
            return _Retryable(f"{kind} timeout", f"no answer within {limit:g} s", backoff)
        except httpx.TransportError as exc:
            return _Retryable("connection failed", str(exc) or type(exc).__name__, backoff)
        if response.is_success:
            return response
        body = _excerpt(response.text)
        if response.status_code == 429 or response.status_code >= 500:
            wait = _retry_after(response.headers.get("retry-after"))
            return _Retryable(
                f"HTTP {response.status_code}", body, backoff if wait is None else wait
            )
        raise _GaveUp(f"HTTP {response.status_code}: {body}")

    def _request(
        self, messages: list[dict[str, str]]
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        base = self.config.base_url.rstrip("/")
        common = {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "temperature": 0,
        }
        if self.config.protocol == "anthropic":
            headers = {"anthropic-version": ANTHROPIC_VERSION}
            if self.api_key:
                headers["x-api-key"] = self.api_key
            payload = {**common, "system": SYSTEM_PROMPT, "messages": messages}
            return f"{base}/messages", payload, headers
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        payload = {
            **common,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *messages],
            "response_format": {"type": "json_object"},
        }
        return f"{base}/chat/completions", payload, headers

    def _read(self, response: httpx.Response) -> tuple[str | None, str]:
        try:
            body = response.json()
        except ValueError:
            return None, f"response body is not JSON: {_excerpt(response.text)!r}"
        anthropic = self.config.protocol == "anthropic"
        usage = body.get("usage") if isinstance(body, dict) else None
        if isinstance(usage, dict):
            self.input_tokens += _count(usage.get("input_tokens" if anthropic else "prompt_tokens"))
            self.output_tokens += _count(
                usage.get("output_tokens" if anthropic else "completion_tokens")
            )
        try:
            if anthropic:
                text = "".join(b["text"] for b in body["content"] if b.get("type") == "text")
            else:
                text = body["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            return None, f"response has no answer text: {_excerpt(response.text)!r}"
        return str(text), ""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (a number or an HTTP date), capped at MAX_WAIT_S."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_WAIT_S)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_BODY_CHARS else text[:MAX_ERROR_BODY_CHARS] + "..."


def _redact(text: str, api_key: str | None) -> str:
    return text.replace(api_key, "[redacted]") if api_key else text
