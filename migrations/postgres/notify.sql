-- Announces rows that programs other than the broker insert: per INSERT
-- statement, one notification on the channel the broker listens to for this
-- table. With a group column named (the trigger's second argument), the
-- payload names each group the statement wrote, so only that group's
-- subscriptions claim; a statement that wrote more than sixteen groups, or a
-- trigger without a group column, sends an empty payload, which wakes every
-- subscription of the table. Brokers with ListenNotify wake at once. Only
-- the group trigger keeps the statement's rows (a transition table), which
-- costs a bulk insert a copy of what it wrote.
CREATE OR REPLACE FUNCTION sqlinbox_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    groups text[];
BEGIN
    IF TG_NARGS < 2 THEN
        PERFORM pg_notify(TG_ARGV[0], '');
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT array_agg(g) FROM (SELECT DISTINCT %I::text AS g FROM sqlinbox_new LIMIT 17) d', TG_ARGV[1])
        INTO groups;
    IF groups IS NULL THEN
        RETURN NULL;
    END IF;
    IF cardinality(groups) > 16 THEN
        PERFORM pg_notify(TG_ARGV[0], '');
        RETURN NULL;
    END IF;
    -- A group longer than a payload may be wakes the whole table.
    PERFORM pg_notify(TG_ARGV[0], CASE WHEN octet_length(g) < 7900 THEN coalesce(g, '') ELSE '' END)
        FROM unnest(groups) AS g;
    RETURN NULL;
END
$fn$
-- ;
DROP TRIGGER IF EXISTS "{{name}}_sqlinbox_notify" ON {{table}}
-- ;
CREATE TRIGGER "{{name}}_sqlinbox_notify" AFTER INSERT ON {{table}}
{{referencing}}FOR EACH STATEMENT EXECUTE FUNCTION sqlinbox_notify_insert({{args}})
