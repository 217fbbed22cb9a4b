-- The reference inbox table. Producers insert with plain SQL:
--   INSERT INTO invoice_jobs (payload) VALUES ('{"invoice": 1}');
-- Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', as strftime('%Y-%m-%d %H:%M:%f') writes them.
-- AUTOINCREMENT keeps ids from being reused after the newest row is deleted.
CREATE TABLE IF NOT EXISTS {{table}} (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    group_name   TEXT NOT NULL DEFAULT '',
    locked_until DATETIME,
    payload      BLOB,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
)
-- ;
CREATE INDEX IF NOT EXISTS "{{name}}_group_id" ON {{table}} (group_name, id)
