"""The stops asked during the start (SIGTERM, Ctrl-C's SIGINT, a closed terminal's SIGHUP)."""

from __future__ import annotations

import signal

# The stops that came during the start (app.py's imports, the store's load), which
# server.serve acts on once it is done: in the image Python is PID 1, and the kernel drops a
# signal PID 1 has no handler for; a Ctrl-C was a KeyboardInterrupt's traceback. The server
# puts note_stop back when it is done, and raises its signals again.
stops_asked: list[int] = []


def note_stop(signum: int, frame: object) -> None:
    """Note a stop for the server to act on; a second Ctrl-C stops at once, quietly."""
    if signum == signal.SIGINT and signal.SIGINT in stops_asked:
        raise SystemExit(130)  # wherever the start is
    stops_asked.append(signum)


def note_stops() -> None:
    """Have SIGTERM, SIGINT and SIGHUP noted (note_stop) until the server takes them over."""
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # `nohup`'s SIGHUP stays ignored; a SIGINT a shell ignores for its background jobs is
        # taken, as uvicorn takes it while serving (Ctrl-C can't reach such a job; a kill can).
        if stop != signal.SIGHUP or signal.getsignal(stop) is not signal.SIG_IGN:
            signal.signal(stop, note_stop)
