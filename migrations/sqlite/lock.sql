-- The lock store's table: one row per holder place of a lock, the primary
-- key capping the holders. expires_at is integer Unix milliseconds; a
-- released place keeps its row (and its fence) with expires_at 0.
CREATE TABLE IF NOT EXISTS sqlinbox_locks (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    slot       INTEGER NOT NULL CHECK (slot >= 0),
    token      TEXT    NOT NULL DEFAULT '',
    fence      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name, slot)
) WITHOUT ROWID
