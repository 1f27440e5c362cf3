"""`scheduler model-server`: the scripted model server in the foreground, until stopped."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("model-server")
@click.option(
    "--script",
    "script_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='YAML or JSON `turns:` the model answers (default: "done" at once).',
)
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="0: a free port.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--record",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append each request, and how it was answered, as a JSON line to this file.",
)
def model_server(script_file: Path | None, port: int, host: str, record: Path | None) -> None:
    """Answer agent CLIs' model calls from a script, at no cost (Ctrl-C stops it).

    Speaks Anthropic Messages, OpenAI Chat Completions and Responses, and Gemini
    generateContent, streaming and not. The first lines printed are the address
    and the variables that point each CLI at it; every request is recorded
    (GET /_evalfleet/requests, and --record).

    \b
    Examples:
      scheduler model-server --script turns.yaml --port 8700
      scheduler model-server --record requests.jsonl      # answers "done"
    """
    from core.modelserver import ModelScript, ModelServer, load_model_script

    script = load_model_script(script_file) if script_file is not None else ModelScript()
    try:
        server = ModelServer(script, host=host, port=port, record=record)
    except OSError as exc:
        raise click.UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    click.echo(f"LISTENING {server.base_url}")
    for name, value in server.environment().items():
        click.echo(f"export {name}={value}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo(f"stopped after {len(server.requests())} requests", err=True)
