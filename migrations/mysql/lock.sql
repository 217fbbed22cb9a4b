-- The lock store's table on MariaDB and MySQL: one row per held place of a
-- lock, the primary key capping the holders. Names are bytes (VARBINARY:
-- compared exactly, not by a case-folding collation), expires_at is UTC.
-- A release deletes its row; the store's sweep the rows of expired holds.
CREATE TABLE IF NOT EXISTS sqlinbox_locks (
    namespace  VARBINARY(255) NOT NULL,
    name       VARBINARY(255) NOT NULL,
    slot       INT            NOT NULL CHECK (slot >= 0),
    token      VARBINARY(255) NOT NULL DEFAULT '',
    fence      BIGINT         NOT NULL,
    expires_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (namespace, name, slot),
    KEY sqlinbox_locks_expires (expires_at)
) ENGINE=InnoDB
-- ;
-- The fencing numbers of every lock of the table, in one row, so that a
-- name's rows can go when its holds end and its next holder still gets a
-- greater number.
CREATE TABLE IF NOT EXISTS sqlinbox_locks_fence (
    id    TINYINT NOT NULL PRIMARY KEY,
    fence BIGINT  NOT NULL
) ENGINE=InnoDB
-- ;
INSERT IGNORE INTO sqlinbox_locks_fence (id, fence) VALUES (1, 0)
