-- Schedules on MariaDB and MySQL: heartbeats of the instances that run each
-- schedule, one row per moment holding the membership its first instance
-- saw, the moments' shares, and the instances' holds on their names. Times
-- are DATETIME(6) in UTC, as the library's pools read and write them. Keys
-- are VARCHAR: an index takes no TEXT whole.
CREATE TABLE IF NOT EXISTS {{heartbeats}} (
    schedule      VARCHAR(255) NOT NULL,
    instance      VARCHAR(255) NOT NULL,
    runners       INT          NOT NULL,
    expires_at    DATETIME(6)  NOT NULL,
    spec          TEXT         NOT NULL,
    placement     TEXT         NOT NULL,
    next_at       DATETIME(6),
    runs          BIGINT       NOT NULL DEFAULT 0,
    failures      BIGINT       NOT NULL DEFAULT 0,
    last_error    TEXT,
    last_error_at DATETIME(6),
    PRIMARY KEY (schedule, instance),
    -- Serves a clean stop, which deletes every row of one instance.
    KEY {{heartbeats}}_instance (instance)
) ENGINE=InnoDB
-- ;
CREATE TABLE IF NOT EXISTS {{moments}} (
    schedule   VARCHAR(255) NOT NULL,
    fired_at   DATETIME(6)  NOT NULL,
    writer     TEXT         NOT NULL,
    members    TEXT         NOT NULL,
    created_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (schedule, fired_at),
    -- Serves the prune of old moments.
    KEY {{moments}}_fired_at (fired_at)
) ENGINE=InnoDB
-- ;
-- One row per share of a moment: dealt to one instance, held under a lease
-- by the instance that runs it (dealt_to, or another that took it over when
-- the lease ran out). A share that ran gets done_at and its handler's error
-- and stays, for operators, until its moment is pruned.
CREATE TABLE IF NOT EXISTS {{shares}} (
    schedule       VARCHAR(255) NOT NULL,
    moment         BIGINT       NOT NULL,
    worker         INT          NOT NULL,
    workers        INT          NOT NULL,
    dealt_to       VARCHAR(255) NOT NULL,
    instance_index INT          NOT NULL,
    instances      INT          NOT NULL,
    runner         INT          NOT NULL,
    runners        INT          NOT NULL,
    holder         VARCHAR(255),
    token          VARCHAR(64),
    locked_until   DATETIME(6)  NOT NULL,
    done_at        DATETIME(6),
    error          TEXT,
    PRIMARY KEY (schedule, moment, worker),
    -- Serves the sweep for shares whose lease ran out.
    KEY {{shares}}_locked_until (locked_until),
    -- Serves the prune of old moments at each heartbeat.
    KEY {{shares}}_moment (moment)
) ENGINE=InnoDB
-- ;
-- One row per running scheduler: keeps two schedulers off one instance name.
CREATE TABLE IF NOT EXISTS {{instances}} (
    instance   VARCHAR(255) NOT NULL PRIMARY KEY,
    token      VARCHAR(64)  NOT NULL,
    expires_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB
