-- The slots of limits per key (inbox.Limit): one row per slot of a key
-- value, the primary key capping them (slot is below the limit). A
-- slot is held while holder is not ''; a settlement frees it, and a claim's
-- sweep frees those whose expiry (Unix microseconds) has passed, keeping
-- the row for the key's next take (deleted once free for ten minutes).
CREATE TABLE IF NOT EXISTS sqlinbox_limit_slots (
    limit_name text   NOT NULL,
    key_value  text   NOT NULL,
    slot       integer NOT NULL CHECK (slot >= 0),
    holder     text   NOT NULL,
    fence      bigint NOT NULL,
    expires_at bigint NOT NULL,
    row_id     bigint NOT NULL,
    PRIMARY KEY (limit_name, key_value, slot)
) WITH (fillfactor = 50) -- room on each page for takes and frees as HOT updates
