-- The lock store's table: one row per held place of a lock, the primary key
-- capping the holders. A release deletes its row; the store's sweep deletes
-- the rows of expired holds.
CREATE TABLE IF NOT EXISTS sqlinbox_locks (
    namespace  text        NOT NULL,
    name       text        NOT NULL,
    slot       integer     NOT NULL CHECK (slot >= -1),
    token      text        NOT NULL DEFAULT '',
    fence      bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, name, slot)
)
-- ;
-- Fencing numbers of every lock of the table, so that a name's rows can go
-- when its holds end and its next holder still gets a greater number.
CREATE SEQUENCE IF NOT EXISTS sqlinbox_locks_fence
-- ;
-- Tables of earlier versions kept a counter row (slot -1) per name and the
-- rows of released places: the sequence starts above their greatest fence,
-- and they go.
-- A sequence never drawn from answers last_value itself next, hence the
-- second case: an old table whose greatest fence is 1.
SELECT setval('sqlinbox_locks_fence', m.fence)
FROM (SELECT max(fence) AS fence FROM sqlinbox_locks) AS m, sqlinbox_locks_fence AS s
WHERE m.fence > s.last_value OR (m.fence = s.last_value AND NOT s.is_called)
-- ;
DELETE FROM sqlinbox_locks WHERE slot = -1 OR expires_at <= now()
