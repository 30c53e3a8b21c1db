"""Opening the store the settings ask for (memory, a data file, a database), loaded and seeded.

A SettingsError (one line) says why it can't be; check_workers refuses the uvicorn workers
that can't share it."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from collections.abc import Mapping

import msgspec

from database import DatabaseStore
from database_url import describe
from datafile import FileStore
from parsing import json_problem, not_json_reason
from records import DataFileError
from schemas import SeedPet, seed_decoder
from settings import Settings, SettingsError, is_service_link
from store import MemoryStore, PetStore, seed_pets
from tables import DatabaseError

logger = logging.getLogger("petstore")


def _read_seed(path: str) -> list[SeedPet]:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise SettingsError(f"seed file {path}: cannot read: {error.strerror}") from None
    try:
        return seed_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        # msgspec names the first wrong type it meets even where the syntax breaks further
        # on: not JSON wins over that, as in a body (parsing.decode_new_pet).
        problem = json_problem(data) if isinstance(error, msgspec.ValidationError) else None
        reason = problem or not_json_reason(error, data)
        raise SettingsError(f"seed file {path}: not a JSON array of pets: {reason}") from None


def warn_of_unread(environ: Mapping[str, str]) -> None:
    """Under `uvicorn app:app`, warn of what it leaves unread: PETSTORE_HOST and PETSTORE_PORT
    are uvicorn's --host and --port to it (a PETSTORE_HOST of 0.0.0.0 was ignored in silence,
    probe 15)."""
    for variable, flag in (("PETSTORE_HOST", "host"), ("PETSTORE_PORT", "port")):
        if variable in environ and not is_service_link(variable, environ):
            logger.warning(
                "%s is not read under `uvicorn app:app`: its --%s says where it listens",
                variable,
                flag,
            )


def check_workers(settings: Settings, *, generated_key: bool) -> None:
    """Under `uvicorn app:app`, refuse a worker that has siblings (--workers) where each would
    go its own way: over pets in memory, or with a key it made itself."""
    if multiprocessing.parent_process() is None or _reloading():
        return
    if generated_key:
        raise SettingsError(
            "several workers would each make their own key: configure one (PETSTORE_API_KEYS)"
        )
    if settings.data is None and settings.database is None:
        raise SettingsError(
            "several workers would each keep their own in-memory pets: run one worker"
        )


def _reloading() -> bool:
    """Whether uvicorn runs us under --reload: one process at a time, started again on a
    change, where pets in memory are fine. Its worker can't tell that from --workers but by
    the command line it inherits (multiprocessing's spawn passes it on) or uvicorn's variable."""
    # Only --reload itself: --reload-dir and the like reload nothing without it.
    variable = os.environ.get("UVICORN_RELOAD", "").lower()
    return "--reload" in sys.argv or variable in ("1", "true", "yes", "on")


def open_store(settings: Settings) -> PetStore:
    """The store the settings ask for, loaded and seeded; SettingsError says why it can't be."""
    seed = _read_seed(settings.seed) if settings.seed is not None else None
    if seed is not None:
        try:
            seed_pets(seed, last_id=0)  # a bad seed stops the start before any file is made
        except ValueError as error:
            raise SettingsError(f"seed file {settings.seed}: {error}") from None
    if settings.database is not None:
        database = DatabaseStore(
            settings.database,
            seed or (),
            where=describe(settings.database),
            password=settings.database_password,
        )
        try:
            database.prepare_now()  # seeds an empty database; waits for none that is down
        except DatabaseError as error:
            raise SettingsError(str(error)) from None
        return database
    try:
        store: PetStore = MemoryStore() if settings.data is None else FileStore(settings.data)
    except DataFileError as error:
        raise SettingsError(f"data file {error}") from None
    if seed is not None:
        try:
            seeded = store.seed(seed)
        except (ValueError, DataFileError) as error:
            raise SettingsError(f"seed file {settings.seed}: {error}") from None
        if seeded:
            logger.info("seeded %d pets from %s", len(seed), settings.seed)
    return store
