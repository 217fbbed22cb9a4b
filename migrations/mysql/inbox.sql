-- The reference inbox table on MariaDB (10.6 or later) and MySQL (8.0 or
-- later). Producers insert with plain SQL:
--   INSERT INTO invoice_jobs (payload) VALUES ('{"invoice": 1}');
-- Times are DATETIME(6) in UTC; created_at's default is UTC whatever the
-- session's time zone. InnoDB: claims need its row locks and transactions.
-- The group index is in the CREATE TABLE: MySQL has no CREATE INDEX IF NOT
-- EXISTS.
CREATE TABLE IF NOT EXISTS {{table}} (
    id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    group_name   VARCHAR(255) NOT NULL DEFAULT '',
    locked_until DATETIME(6) NULL,
    payload      LONGBLOB,
    attempts     INT NOT NULL DEFAULT 0,
    last_error   TEXT,
    created_at   DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    KEY `{{name}}_group_id` (group_name, id)
) ENGINE=InnoDB
