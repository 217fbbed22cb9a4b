-- The lock store's table: one row per held place of a lock, the primary
-- key capping the holders. expires_at is integer Unix milliseconds. A release
-- deletes its row, and the store's sweep the rows of expired holds, except
-- the row of the table's greatest fence: the next fence of every lock is one
-- more (the index finds it).
CREATE TABLE IF NOT EXISTS sqlinbox_locks (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    slot       INTEGER NOT NULL CHECK (slot >= 0),
    token      TEXT    NOT NULL DEFAULT '',
    fence      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name, slot)
) WITHOUT ROWID
-- ;
CREATE INDEX IF NOT EXISTS sqlinbox_locks_fence ON sqlinbox_locks (fence)
