-- The registry: running service instances, their subscriptions, per-minute
-- counts per queue and the paused flags. Times are Unix milliseconds
-- (bigint) on every engine, so one set of statements reads them everywhere.
CREATE TABLE IF NOT EXISTS {{instances}} (
    id           text    NOT NULL PRIMARY KEY,
    service      text    NOT NULL,
    version      text    NOT NULL,
    host         text    NOT NULL,
    pid          integer NOT NULL,
    started_at   bigint  NOT NULL,
    heartbeat_at bigint  NOT NULL,
    -- the heartbeat's interval: an instance is gone once its heartbeat is
    -- three intervals old
    every_ms     bigint  NOT NULL,
    -- why its pickups wait for the poll ('' when notifications or a
    -- poll were what it asked for): Stats().PickupFallback
    pickup_fallback text NOT NULL DEFAULT ''
)
-- ;
CREATE TABLE IF NOT EXISTS {{subscriptions}} (
    instance   text    NOT NULL,
    position   integer NOT NULL,
    name       text    NOT NULL,
    table_name text    NOT NULL,
    group_name text    NOT NULL,
    form       text    NOT NULL,
    workers    integer NOT NULL,
    lease_ms   bigint  NOT NULL,
    -- a JSON object: role -> column, e.g. {"id":"id","locked_until":"locked_until"}
    roles      text    NOT NULL,
    -- its limits per key (inbox.Limit, inbox.SharedLimit) as a JSON array,
    -- NULL without: [{"kind":"limit","name":"jobs:customer_id",
    -- "column":"customer_id","n":2}]; kind says how n reads
    limit_spec text,
    PRIMARY KEY (instance, position)
)
-- ;
-- One row per queue, minute and outcome, added to by every instance.
CREATE TABLE IF NOT EXISTS {{minutes}} (
    table_name text   NOT NULL,
    group_name text   NOT NULL,
    minute     bigint NOT NULL,
    outcome    text   NOT NULL,
    handled    bigint NOT NULL,
    total_us   bigint NOT NULL,
    max_us     bigint NOT NULL,
    PRIMARY KEY (table_name, group_name, minute, outcome)
)
-- ;
-- Serves the prune of minutes older than the registry keeps.
CREATE INDEX IF NOT EXISTS {{minutes}}_minute ON {{minutes}} (minute)
-- ;
-- A paused queue: group_name '' pauses every subscription of the table.
CREATE TABLE IF NOT EXISTS {{paused}} (
    table_name text   NOT NULL,
    group_name text   NOT NULL,
    paused_at  bigint NOT NULL,
    PRIMARY KEY (table_name, group_name)
)
-- ;
-- A schedule's placement set by an operator over its code's ('one',
-- 'every-instance' or 'every-worker'): every instance of the schedule reads
-- it at each moment.
CREATE TABLE IF NOT EXISTS {{placements}} (
    schedule  text   NOT NULL PRIMARY KEY,
    placement text   NOT NULL,
    set_at    bigint NOT NULL
)
-- ;
-- A request to cancel a row (Operator.Cancel): the instance whose handler
-- runs it ends the handler's context and parks (or deletes) the row, then
-- deletes the request.
CREATE TABLE IF NOT EXISTS {{cancels}} (
    table_name   text   NOT NULL,
    row_id       bigint NOT NULL,
    action       text   NOT NULL,
    reason       text   NOT NULL,
    requested_at bigint NOT NULL,
    PRIMARY KEY (table_name, row_id)
)
