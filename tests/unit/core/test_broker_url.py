"""The broker's URL and its password given apart (core.broker_url)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from core.broker_url import configured_broker, redis_py_url, with_password
from core.errors import BrokerURLError


def test_a_password_file_or_variable_goes_into_the_url_in_place_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (
        "EVALFLEET_BROKER_URL",
        "EVALFLEET_BROKER_PASSWORD",
        "EVALFLEET_BROKER_PASSWORD_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    secret = tmp_path / "password"
    secret.write_text("p@ss/word\nignored\n")
    assert configured_broker("redis://h:6379/0", str(secret)) == "redis://:p%40ss%2Fword@h:6379/0"
    monkeypatch.setenv("EVALFLEET_BROKER_PASSWORD", "from-env")
    assert configured_broker("redis://:old@h:6379/0") == "redis://:from-env@h:6379/0"
    monkeypatch.setenv("EVALFLEET_BROKER_PASSWORD_FILE", str(secret))  # the file first
    assert configured_broker("redis://user@h:6379/0") == "redis://user:p%40ss%2Fword@h:6379/0"
    with pytest.raises(BrokerURLError, match="no broker URL"):
        configured_broker(None)
    (tmp_path / "empty").write_text("")
    for missing in (tmp_path / "empty", tmp_path / "absent"):
        with pytest.raises(BrokerURLError, match="password file"):
            configured_broker("redis://h:6379/0", str(missing))


def test_a_unix_socket_url_is_kombus_redis_socket_and_redis_pys_unix() -> None:
    url = with_password("redis+socket:///run/e/redis.sock?virtual_host=0", "p@w")
    assert url == "redis+socket://:p%40w@/run/e/redis.sock?virtual_host=0"
    assert configured_broker(url) == url
    assert redis_py_url(url) == "unix://:p%40w@/run/e/redis.sock?db=0"
    assert redis.connection.parse_url(redis_py_url(url))["password"] == "p@w"
    assert with_password(url, None) == "redis+socket:///run/e/redis.sock?virtual_host=0"
    assert redis_py_url("redis://h:1/0") == "redis://h:1/0"
