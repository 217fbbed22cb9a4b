-- The slots of limits per key (inbox.Limit): one row per row in work of a
-- key value, the primary key capping them (slot is below the limit). A
-- settlement deletes its row; a claim's sweep deletes those whose expiry
-- (Unix microseconds) has passed.
CREATE TABLE IF NOT EXISTS sqlinbox_limit_slots (
    limit_name text   NOT NULL,
    key_value  text   NOT NULL,
    slot       integer NOT NULL CHECK (slot >= 0),
    holder     text   NOT NULL,
    fence      bigint NOT NULL,
    expires_at bigint NOT NULL,
    row_id     bigint NOT NULL,
    PRIMARY KEY (limit_name, key_value, slot)
)
