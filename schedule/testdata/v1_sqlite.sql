-- The schedule tables as the version before failures and next moments made them (the upgrade test).
-- Schedules: heartbeats of the instances that run each schedule, and one row
-- per moment holding the membership its first instance saw.
-- Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', as strftime('%Y-%m-%d %H:%M:%f') writes them.
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_heartbeats (
    schedule   TEXT    NOT NULL,
    instance   TEXT    NOT NULL,
    runners    INTEGER NOT NULL,
    expires_at TEXT    NOT NULL,
    PRIMARY KEY (schedule, instance)
)
-- ;
-- Serves a clean stop, which deletes every row of one instance.
CREATE INDEX IF NOT EXISTS sqlinbox_schedule_heartbeats_instance ON sqlinbox_schedule_heartbeats (instance)
-- ;
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_moments (
    schedule   TEXT NOT NULL,
    fired_at   TEXT NOT NULL,
    writer     TEXT NOT NULL,
    members    TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (schedule, fired_at)
)
-- ;
-- Serves the prune of old moments.
CREATE INDEX IF NOT EXISTS sqlinbox_schedule_moments_fired_at ON sqlinbox_schedule_moments (fired_at)
-- ;
-- One row per share of a moment not yet done: dealt to one instance, held
-- under a lease by the instance that runs it (dealt_to, or another that took
-- it over when the lease ran out). A share that ran is deleted.
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_shares (
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
    PRIMARY KEY (schedule, moment, worker)
)
-- ;
-- Serves the sweep for shares whose lease ran out.
CREATE INDEX IF NOT EXISTS sqlinbox_schedule_shares_locked_until ON sqlinbox_schedule_shares (locked_until)
-- ;
-- One row per running scheduler: keeps two schedulers off one instance name.
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_instances (
    instance   TEXT PRIMARY KEY,
    token      TEXT NOT NULL,
    expires_at TEXT NOT NULL
)
