-- The lock store's table: one row per holder place of a lock, the primary
-- key capping the holders. slot -1 is the name's fencing counter; a released
-- place keeps its row with expires_at '-infinity'.
CREATE TABLE IF NOT EXISTS sqlinbox_locks (
    namespace  text        NOT NULL,
    name       text        NOT NULL,
    slot       integer     NOT NULL CHECK (slot >= -1),
    token      text        NOT NULL DEFAULT '',
    fence      bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, name, slot)
)
