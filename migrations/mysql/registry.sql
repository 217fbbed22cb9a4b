-- The registry on MariaDB and MySQL: running service instances, their
-- subscriptions, per-minute counts per queue and the paused flags. Times
-- are Unix milliseconds (BIGINT) on every engine, so one set of statements
-- reads them everywhere. Keys are VARCHAR: an index takes no TEXT whole.
CREATE TABLE IF NOT EXISTS {{instances}} (
    id           VARCHAR(255) NOT NULL PRIMARY KEY,
    service      TEXT         NOT NULL,
    version      TEXT         NOT NULL,
    host         TEXT         NOT NULL,
    pid          INT          NOT NULL,
    started_at   BIGINT       NOT NULL,
    heartbeat_at BIGINT       NOT NULL,
    -- the heartbeat's interval: an instance is gone once its heartbeat is
    -- three intervals old
    every_ms     BIGINT       NOT NULL,
    -- why its pickups wait for the poll ('' when notifications or a
    -- poll were what it asked for): Stats().PickupFallback
    pickup_fallback VARCHAR(1024) NOT NULL DEFAULT ''
) ENGINE=InnoDB
-- ;
CREATE TABLE IF NOT EXISTS {{subscriptions}} (
    instance   VARCHAR(255) NOT NULL,
    position   INT          NOT NULL,
    name       TEXT         NOT NULL,
    table_name TEXT         NOT NULL,
    group_name TEXT         NOT NULL,
    form       TEXT         NOT NULL,
    workers    INT          NOT NULL,
    lease_ms   BIGINT       NOT NULL,
    -- a JSON object: role -> column, e.g. {"id":"id","locked_until":"locked_until"}
    roles      TEXT         NOT NULL,
    -- its limits per key as a JSON array, NULL without (see limit_spec in
    -- migrations/sqlite/registry.sql)
    limit_spec TEXT         NULL,
    PRIMARY KEY (instance, position)
) ENGINE=InnoDB
-- ;
-- One row per queue, minute and outcome, added to by every instance; the
-- minute index serves the prune of minutes older than the registry keeps.
CREATE TABLE IF NOT EXISTS {{minutes}} (
    table_name VARCHAR(255) NOT NULL,
    group_name VARCHAR(255) NOT NULL,
    minute     BIGINT       NOT NULL,
    outcome    VARCHAR(32)  NOT NULL,
    handled    BIGINT       NOT NULL,
    total_us   BIGINT       NOT NULL,
    max_us     BIGINT       NOT NULL,
    PRIMARY KEY (table_name, group_name, minute, outcome),
    KEY {{minutes}}_minute (minute)
) ENGINE=InnoDB
-- ;
-- A paused queue: group_name '' pauses every subscription of the table.
CREATE TABLE IF NOT EXISTS {{paused}} (
    table_name VARCHAR(255) NOT NULL,
    group_name VARCHAR(255) NOT NULL,
    paused_at  BIGINT       NOT NULL,
    PRIMARY KEY (table_name, group_name)
) ENGINE=InnoDB
-- ;
-- A schedule's placement set by an operator over its code's ('one',
-- 'every-instance' or 'every-worker'): every instance of the schedule reads
-- it at each moment.
CREATE TABLE IF NOT EXISTS {{placements}} (
    schedule  VARCHAR(255) NOT NULL PRIMARY KEY,
    placement VARCHAR(32)  NOT NULL,
    set_at    BIGINT       NOT NULL
) ENGINE=InnoDB
-- ;
-- A request to cancel a row (Operator.Cancel): the instance whose handler
-- runs it ends the handler's context and parks (or deletes) the row, then
-- deletes the request.
CREATE TABLE IF NOT EXISTS {{cancels}} (
    table_name   VARCHAR(255)  NOT NULL,
    row_id       BIGINT        NOT NULL,
    action       VARCHAR(16)   NOT NULL,
    reason       VARCHAR(1024) NOT NULL,
    requested_at BIGINT        NOT NULL,
    PRIMARY KEY (table_name, row_id)
) ENGINE=InnoDB
