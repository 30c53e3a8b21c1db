"""The command line: the service's flags, their help, an unknown argument refused unshown.

An argument that is none of them is refused without showing it (it may be a key); settings.py
reads the flags with the environment."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import Any, Final

# uvicorn's levels (uvicorn.config.LOG_LEVELS, which logs.py maps), named here so that
# `healthcheck`, which reads the settings every 10 s, needn't import uvicorn.
LOG_LEVELS: Final = ("critical", "error", "warning", "info", "debug", "trace")

# `python app.py healthcheck`'s usage (healthcheck.py answers its --help).
HEALTHCHECK_USAGE: Final = "app.py healthcheck [--ready] [--host HOST] [--port PORT]"
HEALTHCHECK_SECONDS: Final = 2.0  # how long `healthcheck` waits for a whole answer

EPILOG: Final = f"""\
Each flag has an environment variable, the flag winning: PETSTORE_ and the flag's name in
capitals (PETSTORE_MAX_BODY); PETSTORE_API_KEYS, PETSTORE_ADMIN_KEYS and PETSTORE_CORS_ORIGINS
take a comma-separated list, PETSTORE_API_KEYS_FILE a file, PETSTORE_DATABASE_URL the URL
(README, Settings). A client's address comes from X-Forwarded-For only from the proxies
FORWARDED_ALLOW_IPS names (uvicorn's variable; none without it).

  python {HEALTHCHECK_USAGE}
      exit 0 when the service answers /healthz (--ready: /readyz) within \
{HEALTHCHECK_SECONDS:g} s, else 1
"""


# Each flag, its value's name and its help (the default in parentheses).
FLAGS: Final = (
    ("--host", "HOST", "address to listen on (127.0.0.1)"),
    ("--port", "PORT", "port to listen on, 0 for any free one (8000)"),
    ("--data", "FILE", "keep pets in this JSON Lines file (in memory)"),
    ("--seed", "FILE", "a JSON array of pets to start an empty store with"),
    ("--api-key", "KEY", "a key accepted (one made and printed), repeatable"),
    ("--api-key-file", "FILE", "keys accepted, one a line"),
    ("--max-body", "BYTES", "the largest request body accepted (1048576)"),
    ("--root-path", "PATH", "the prefix a proxy strips off (empty)"),
    ("--log-level", "LEVEL", f"{'|'.join(LOG_LEVELS)} (info)"),
    ("--log-format", "FORMAT", "text|json (text)"),
    ("--client-timeout", "SECONDS", "close a connection whose client stalls this long (10)"),
    ("--cors-origin", "ORIGIN", "a browser origin allowed, or * (none), repeatable"),
    ("--admin-key", "KEY", "opens the test-control plane under /_admin, repeatable"),
    ("--journal-size", "N", "requests the plane's journal keeps (1000)"),
    ("--metrics", "SWITCH", "on|off: GET /metrics (on)"),
    ("--database", "URL", "keep pets in PostgreSQL: postgresql://USER:PASSWORD@HOST:PORT/DB"),
)


class FlagError(Exception):
    """A command line that can't be read; its text never shows a value given."""


# What an unknown argument must look like to be shown (when it is close to one of ours): a
# long flag's name, lower case (`_` for `-` too: `--admin_key`).
_FLAG_NAME: Final = re.compile(r"--[a-z][a-z0-9_-]{0,30}")


# Words of a command, given as arguments: `podman run petstore python app.py --port 9000`.
_COMMAND_WORDS: Final = frozenset({"python", "python3", "app.py", "uvicorn", "app:app"})


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        # What argparse quotes is a value given (`-hKEY`: "ignored explicit argument 'KEY'").
        raise FlagError(re.sub(r"'[^']*'", "(not shown)", message))

    def parse_flags(self, argv: Sequence[str]) -> argparse.Namespace:
        """The flags. An argument that is none of them is never shown, for it may be a key (a
        mistyped `--api-kye KEY`, a value that begins with `-`, `"--api-key KEY"` as one
        argument), unless it is a flag's name close to one of ours, or a word of a command
        (`python app.py` after the image's name, which runs it already)."""
        flags, unknown = self.parse_known_args(argv)
        if unknown:
            ours = [name for action in self._actions for name in action.option_strings]
            shown, hidden = [], 0
            if commands := [item for item in unknown if item in _COMMAND_WORDS]:
                shown.append(
                    f"{' '.join(commands)}: a command given as arguments (the image runs"
                    " `python app.py` itself: give it flags only)"
                )
            for item in unknown:
                if item in _COMMAND_WORDS:
                    continue
                name = item.partition("=")[0]
                close = difflib.get_close_matches(name, ours, n=1, cutoff=0.75)
                # One of ours with more after it (`--data-file` for --data), which may be a key
                # (`--api-key-KEY`): not shown past ours.
                longer = [flag for flag in ours if flag[1] == "-" and name.startswith(f"{flag}-")]
                if _FLAG_NAME.fullmatch(name) and close:
                    shown.append(f"unknown flag {name} (did you mean {close[0]}?)")
                elif longer:
                    shown.append(f"unknown flag {longer[0]}-... (did you mean {longer[0]}?)")
                else:
                    hidden += 1
            if hidden:
                what = "argument" if hidden == 1 else "arguments"
                shown.append(f"{hidden} unknown {what}, not shown (a key?)")
            raise FlagError("; ".join(shown) + "; --help lists the flags")
        return flags


def parser() -> Parser:
    # No abbreviations: `--po 0` would mean --port until a flag named --po... comes.
    flag_parser = Parser(
        prog="app.py",
        description="Serve the petstore HTTP/JSON interface.",
        epilog=EPILOG,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, metavar, text in FLAGS:
        repeatable = text.endswith(", repeatable")
        flag_parser.add_argument(
            name, metavar=metavar, help=text, action="append" if repeatable else "store"
        )
    return flag_parser
