-- Schedules: heartbeats of the instances that run each schedule, and one row
-- per moment holding the membership its first instance saw.
-- Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', as strftime('%Y-%m-%d %H:%M:%f') writes them.
CREATE TABLE IF NOT EXISTS {{heartbeats}} (
    schedule   TEXT    NOT NULL,
    instance   TEXT    NOT NULL,
    runners    INTEGER NOT NULL,
    expires_at TEXT    NOT NULL,
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
