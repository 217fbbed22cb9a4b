-- Schedules: heartbeats of the instances that run each schedule, and one row
-- per moment holding the membership its first instance saw.
-- Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', as strftime('%Y-%m-%d %H:%M:%f') writes them.
CREATE TABLE IF NOT EXISTS {{heartbeats}} (
    schedule   TEXT    NOT NULL,
    instance   TEXT    NOT NULL,
    runners    INTEGER NOT NULL,
    expires_at TEXT    NOT NULL,
    spec          TEXT    NOT NULL DEFAULT '',
    placement     TEXT    NOT NULL DEFAULT '',
    next_at       TEXT,
    runs          INTEGER NOT NULL DEFAULT 0,
    failures      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    last_error_at TEXT,
    PRIMARY KEY (schedule, instance)
)
-- ;
-- Serves a clean stop, which deletes every row of one instance.
CREATE INDEX IF NOT EXISTS {{heartbeats}}_instance ON {{heartbeats}} (instance)
-- ;
CREATE TABLE IF NOT EXISTS {{moments}} (
    schedule   TEXT NOT NULL,
    fired_at   TEXT NOT NULL,
    writer     TEXT NOT NULL,
    members    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (schedule, fired_at)
)
-- ;
-- Serves the prune of old moments.
CREATE INDEX IF NOT EXISTS {{moments}}_fired_at ON {{moments}} (fired_at)
-- ;
-- One row per share of a moment: dealt to one instance, held under a lease
-- by the instance that runs it (dealt_to, or another that took it over when
-- the lease ran out). A share that ran gets done_at and its handler's error
-- and stays, for operators, until its moment is pruned.
CREATE TABLE IF NOT EXISTS {{shares}} (
    schedule       TEXT    NOT NULL,
    moment         INTEGER NOT NULL,
    worker         INTEGER NOT NULL,
    workers        INTEGER NOT NULL,
    dealt_to       TEXT    NOT NULL,
    instance_index INTEGER NOT NULL,
    instances      INTEGER NOT NULL,
    runner         INTEGER NOT NULL,
    runners        INTEGER NOT NULL,
    holder         TEXT,
    token          TEXT,
    locked_until   TEXT    NOT NULL,
    done_at        TEXT,
    error          TEXT,
    PRIMARY KEY (schedule, moment, worker)
)
-- ;
-- Serves the sweep for shares whose lease ran out.
CREATE INDEX IF NOT EXISTS {{shares}}_locked_until ON {{shares}} (locked_until)
-- ;
-- Serves the prune of old moments at each heartbeat: done shares stay until
-- then, so without it every heartbeat reads the whole table.
CREATE INDEX IF NOT EXISTS {{shares}}_moment ON {{shares}} (moment)
-- ;
-- One row per running scheduler: keeps two schedulers off one instance name.
CREATE TABLE IF NOT EXISTS {{instances}} (
    instance   TEXT PRIMARY KEY,
    token      TEXT NOT NULL,
    expires_at TEXT NOT NULL
)
