-- The slots of limits per key (inbox.Limit): one row per slot of a key
-- value, the primary key capping them (slot is below the limit). A
-- slot is held while holder is not ''; a settlement frees it, and a claim's
-- sweep frees those whose expiry (Unix microseconds) has passed, keeping
-- the row for the key's next take (deleted once free for ten minutes).
CREATE TABLE IF NOT EXISTS sqlinbox_limit_slots (
    limit_name TEXT    NOT NULL,
    key_value  TEXT    NOT NULL,
    slot       INTEGER NOT NULL CHECK (slot >= 0),
    holder     TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    row_id     INTEGER NOT NULL,
    PRIMARY KEY (limit_name, key_value, slot)
) WITHOUT ROWID
