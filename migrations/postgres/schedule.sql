-- Schedules: heartbeats of the instances that run each schedule, and one row
-- per moment holding the membership its first instance saw.
CREATE TABLE IF NOT EXISTS {{heartbeats}} (
    schedule   text        NOT NULL,
    instance   text        NOT NULL,
    runners    integer     NOT NULL,
    expires_at timestamptz NOT NULL,
    spec          text        NOT NULL DEFAULT '',
    placement     text        NOT NULL DEFAULT '',
    next_at       timestamptz,
    runs          bigint      NOT NULL DEFAULT 0,
    failures      bigint      NOT NULL DEFAULT 0,
    last_error    text,
    last_error_at timestamptz,
    PRIMARY KEY (schedule, instance)
)
-- ;
-- What operators read (the dashboard's schedules page), added to the
-- tables of versions before it. SQLite has no ADD COLUMN IF NOT EXISTS: its
-- columns are added by ApplySchedules itself.
ALTER TABLE {{heartbeats}}
    ADD COLUMN IF NOT EXISTS spec text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS placement text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS next_at timestamptz,
    ADD COLUMN IF NOT EXISTS runs bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS failures bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_error text,
    ADD COLUMN IF NOT EXISTS last_error_at timestamptz
-- ;
-- Serves a clean stop, which deletes every row of one instance.
CREATE INDEX IF NOT EXISTS {{heartbeats}}_instance ON {{heartbeats}} (instance)
-- ;
CREATE TABLE IF NOT EXISTS {{moments}} (
    schedule   text        NOT NULL,
    fired_at   timestamptz NOT NULL,
    writer     text        NOT NULL,
    members    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
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
    done_at        timestamptz,
    error          text,
    PRIMARY KEY (schedule, moment, worker)
)
-- ;
ALTER TABLE {{shares}}
    ADD COLUMN IF NOT EXISTS done_at timestamptz,
    ADD COLUMN IF NOT EXISTS error text
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
    instance   text        PRIMARY KEY,
    token      text        NOT NULL,
    expires_at timestamptz NOT NULL
)
