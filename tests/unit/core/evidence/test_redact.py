"""The one redactor: every configured key and the broker URL, in every form it leaks in."""

from __future__ import annotations

from core.evidence.redact import MARKER, redact, redact_record, secret_values
from core.matrix import Matrix
from core.results.run import GateResult

PASSWORD = "p@ss/w0rd-123456"  # percent-encoded in the URL
URL = "rediss://:p%40ss%2Fw0rd-123456@broker.internal:6380/0?ssl_cert_reqs=required"


def _matrix() -> Matrix:
    return Matrix.model_validate(
        {"name": "m", "agent": {"command": "true", "api_key_env": "AGENT_KEY"},
         "tiers": [{"id": "T0"}, {"id": "T1", "agent": {"api_key_env": "OTHER_KEY"}}],
         "scenarios": [{"id": "s", "prompt": "go"}], "secret_env": ["TOKEN"],
         "judge": {"api_key_env": "JUDGE_KEY"}}
    )  # fmt: skip


def test_every_configured_key_and_the_broker_url_in_each_form_is_redacted() -> None:
    environ = {"AGENT_KEY": "agent-key-1", "OTHER_KEY": "other-key-2", "TOKEN": "token-value-3",
               "JUDGE_KEY": "judge-key-4", "UNRELATED": "left-alone"}  # fmt: skip
    secrets = secret_values(_matrix(), environ, URL)
    leaks = [
        *(environ[name] for name in ("AGENT_KEY", "OTHER_KEY", "TOKEN", "JUDGE_KEY")),
        URL,
        URL.split("?")[0],  # as given, before the CLI added the TLS default
        "p%40ss%2Fw0rd-123456",  # the password as written in the URL
        PASSWORD,  # and as the server knows it
        "rediss://:**@broker.internal:6380/0?ssl_cert_reqs=required",  # kombu's mask
        "rediss://:***@broker.internal:6380/0",  # the CLI's
    ]
    text = redact(" | ".join([*leaks, "left-alone"]), secrets)
    assert text == " | ".join([MARKER] * len(leaks) + ["left-alone"])


def test_records_are_redacted_in_every_string_keys_included() -> None:
    gate = GateResult(gate_type="script", passed=False, message=f"saw {PASSWORD}",
                      details={PASSWORD: [f"x {URL}"]})  # fmt: skip
    clean = redact_record(gate, secret_values(_matrix(), {}, URL))
    assert PASSWORD not in clean.model_dump_json() and "p%40ss" not in clean.model_dump_json()
    assert clean.message == f"saw {MARKER}" and clean.details == {MARKER: [f"x {MARKER}"]}


def test_a_secret_inside_a_field_name_leaves_the_record_one_that_reads_back() -> None:
    """A judge key "message" (or one within "gate_type") was taken out of the record's
    own field names too: the record no longer validated, and the run was an
    infrastructure error. Field names stay; values and a dict's own keys go."""
    gate = GateResult(gate_type="script", passed=False, message="the message",
                      details={"a message": "message"})  # fmt: skip
    clean = redact_record(gate, ["message"])
    assert clean.message == f"the {MARKER}" and clean.details == {f"a {MARKER}": MARKER}


def test_short_values_and_a_url_without_password_are_handled() -> None:
    environ = {"TOKEN": "abc"}  # too short to redact without erasing ordinary words
    secrets = secret_values(_matrix(), environ, "redis://127.0.0.1:6379/0")
    assert redact("abc at redis://127.0.0.1:6379/0", secrets) == f"abc at {MARKER}"
    assert secret_values(_matrix(), {}, None) == []


def test_a_record_without_a_secret_is_returned_as_it_is_and_escaped_secrets_still_go() -> None:
    clean = GateResult(gate_type="command_succeeds", passed=True, message="exit code 0 ✓")
    assert redact_record(clean, ["token-value-3", URL]) is clean  # searched, not walked
    # JSON writes these escaped, so the record's JSON does not hold them as written.
    for secret in ('quo"ted-secret', "back\\slash-secret", "new\nline-secret"):
        leaky = GateResult(gate_type="script", passed=False, message=f"got {secret}!",
                           details={"out": [secret], secret: 1})  # fmt: skip
        redacted = redact_record(leaky, [secret])
        assert secret not in redacted.model_dump_json() and secret not in str(redacted.details)
        assert redacted.message == f"got {MARKER}!"
        assert redacted.details == {"out": [MARKER], MARKER: 1}


def test_values_of_variables_whose_names_look_secret_are_redacted_unnamed() -> None:
    """A CI runner's credentials reach the worker's environment without the matrix
    naming them; an agent given one (`pass_env`) must not print it into a record."""
    looking_secret = {
        "AWS_SECRET_ACCESS_KEY": "aws-secret-1", "AWS_SESSION_TOKEN": "aws-session-2",
        "GOOGLE_APPLICATION_CREDENTIALS": "/run/gcp-credentials.json",
        "GITHUB_TOKEN": "ghp_github-3", "DB_PASSWORD": "db-password-4",
        "AZURE_CLIENT_SECRET": "azure-secret-5", "STRIPE_API_KEY": "stripe-key-6",
    }  # fmt: skip
    environ = {**looking_secret, "LANG": "C.UTF-8-left", "EDITOR": "left-alone"}
    secrets = secret_values(_matrix(), environ, None)
    text = redact(" | ".join([*looking_secret.values(), "C.UTF-8-left", "left-alone"]), secrets)
    assert text == " | ".join([MARKER] * len(looking_secret) + ["C.UTF-8-left", "left-alone"])
