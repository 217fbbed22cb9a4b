-- Schedules: heartbeats of the instances that run each schedule, and one row
-- per moment holding the membership its first instance saw.
CREATE TABLE IF NOT EXISTS {{heartbeats}} (
    schedule   text        NOT NULL,
    instance   text        NOT NULL,
    runners    integer     NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (schedule, instance)
)
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
