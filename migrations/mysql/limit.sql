-- The slots of limits per key (inbox.Limit) on MariaDB and MySQL: one row
-- per slot of a key value, the primary key capping them (slot is
-- below the limit). Names and keys are bytes (VARBINARY: compared exactly).
-- A slot is held while holder is not ''; a settlement frees it, and a
-- claim's sweep frees those whose expiry (Unix microseconds) has passed,
-- keeping the row for the key's next take (deleted once free for ten
-- minutes).
CREATE TABLE IF NOT EXISTS sqlinbox_limit_slots (
    limit_name VARBINARY(255) NOT NULL,
    key_value  VARBINARY(255) NOT NULL,
    slot       INT            NOT NULL CHECK (slot >= 0),
    holder     VARBINARY(64)  NOT NULL,
    fence      BIGINT         NOT NULL,
    expires_at BIGINT         NOT NULL,
    row_id     BIGINT         NOT NULL,
    PRIMARY KEY (limit_name, key_value, slot)
) ENGINE=InnoDB
