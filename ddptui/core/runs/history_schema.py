"""Provides the history database's schema and its migration in place from older versions."""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 5  # 2: the `verdict` or the `metrics` column; 3: both; 4: the attempts
# (`attempts`, `attempt_of`); 5: `goodput`. An older database gains what it lacks, its rows
# kept.

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    backend TEXT NOT NULL,
    hosts TEXT NOT NULL DEFAULT '[]',
    slurm_job TEXT,
    nodes INTEGER NOT NULL,
    nproc_per_node INTEGER NOT NULL,
    script TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    status TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    ranks TEXT NOT NULL DEFAULT '[]',
    run_dir TEXT NOT NULL,
    console_pid INTEGER,
    console_start TEXT,
    console_host TEXT,
    verdict TEXT NOT NULL DEFAULT '',
    metrics TEXT NOT NULL DEFAULT '{}',
    attempts TEXT NOT NULL DEFAULT '[]',
    attempt_of TEXT,
    goodput TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS runs_started ON runs (started);
"""


def migrate(db: sqlite3.Connection) -> None:
    """The schema brought to SCHEMA_VERSION in one transaction: a new database is created
    whole; an older one keeps every row and gains the columns it lacks (their defaults)."""
    with db:
        db.execute("BEGIN IMMEDIATE")  # two consoles opening an old database: one migrates
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
        if "verdict" not in columns:
            db.execute("ALTER TABLE runs ADD COLUMN verdict TEXT NOT NULL DEFAULT ''")
        if "metrics" not in columns:
            db.execute("ALTER TABLE runs ADD COLUMN metrics TEXT NOT NULL DEFAULT '{}'")
        if "attempts" not in columns:  # its one attempt is read from the row itself
            db.execute("ALTER TABLE runs ADD COLUMN attempts TEXT NOT NULL DEFAULT '[]'")
        if "attempt_of" not in columns:
            db.execute("ALTER TABLE runs ADD COLUMN attempt_of TEXT")
        if "goodput" not in columns:
            db.execute("ALTER TABLE runs ADD COLUMN goodput TEXT NOT NULL DEFAULT ''")
        db.execute("CREATE INDEX IF NOT EXISTS runs_attempt_of ON runs (attempt_of)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
