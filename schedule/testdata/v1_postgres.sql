-- The schedule tables as the version before failures and next moments made them (the upgrade test).
-- Schedules: heartbeats of the instances that run each schedule, and one row
-- per moment holding the membership its first instance saw.
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_heartbeats (
    schedule   text        NOT NULL,
    instance   text        NOT NULL,
    runners    integer     NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (schedule, instance)
)
-- ;
-- Serves a clean stop, which deletes every row of one instance.
CREATE INDEX IF NOT EXISTS sqlinbox_schedule_heartbeats_instance ON sqlinbox_schedule_heartbeats (instance)
-- ;
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_moments (
    schedule   text        NOT NULL,
    fired_at   timestamptz NOT NULL,
    writer     text        NOT NULL,
    members    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
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
    schedule       text        NOT NULL,
    moment         bigint      NOT NULL,
    worker         integer     NOT NULL,
    workers        integer     NOT NULL,
    dealt_to       text        NOT NULL,
    instance_index integer     NOT NULL,
    instances      integer     NOT NULL,
    runner         integer     NOT NULL,
    runners        integer     NOT NULL,
    holder         text,
    token          text,
    locked_until   timestamptz NOT NULL,
    PRIMARY KEY (schedule, moment, worker)
)
-- ;
-- Serves the sweep for shares whose lease ran out.
CREATE INDEX IF NOT EXISTS sqlinbox_schedule_shares_locked_until ON sqlinbox_schedule_shares (locked_until)
-- ;
-- One row per running scheduler: keeps two schedulers off one instance name.
CREATE TABLE IF NOT EXISTS sqlinbox_schedule_instances (
    instance   text        PRIMARY KEY,
    token      text        NOT NULL,
    expires_at timestamptz NOT NULL
)
