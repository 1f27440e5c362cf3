"""A scripted model server: the wire protocols of the agent CLIs and the built-in
agent (Anthropic Messages, OpenAI Chat Completions and Responses, Gemini), answered
turn by turn from a script, every request recorded. How a matrix is dry-run at no
cost, and how the tests drive the real CLIs. I/O: it serves HTTP.
"""

from core.modelserver.script import (
    ModelScript,
    ScriptedError,
    ScriptedToolCall,
    Turn,
    Usage,
    load_model_script,
)
from core.modelserver.server import REQUESTS_PATH, ModelServer, ServedRequest

__all__ = [
    "REQUESTS_PATH",
    "ModelScript",
    "ModelServer",
    "ScriptedError",
    "ScriptedToolCall",
    "ServedRequest",
    "Turn",
    "Usage",
    "load_model_script",
]
