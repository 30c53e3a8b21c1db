"""Opening the store the settings ask for (memory, a data file, a database), loaded and seeded.

A SettingsError (one line) says why it can't be."""

from __future__ import annotations

import logging

import msgspec

from database import DatabaseStore
from database_url import describe
from datafile import FileStore
from parsing import json_problem, not_json_reason
from records import DataFileError
from schemas import SeedPet, seed_decoder
from settings import Settings, SettingsError
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
