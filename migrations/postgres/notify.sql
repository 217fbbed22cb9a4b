-- Announces rows that programs other than the broker insert: one
-- notification per INSERT statement, on the channel the broker listens to
-- for this table, with an empty payload (every subscription of the table
-- claims once). Brokers with ListenNotify on wake at once.
CREATE OR REPLACE FUNCTION sqlinbox_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END
$fn$
-- ;
DROP TRIGGER IF EXISTS "{{name}}_sqlinbox_notify" ON {{table}}
-- ;
CREATE TRIGGER "{{name}}_sqlinbox_notify" AFTER INSERT ON {{table}}
FOR EACH STATEMENT EXECUTE FUNCTION sqlinbox_notify_insert('{{channel}}')
