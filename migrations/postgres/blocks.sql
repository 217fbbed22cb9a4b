-- The block sequence of an inbox table: while a backlog lasts, each claimer
-- takes the next block of ids from it and claims only inside its block, so
-- the claims of many instances do not meet at the table's leading edge. Its
-- values are block numbers (ids divided by the block's size), negative ones
-- too. Owned by the id column: dropping the table drops it.
CREATE SEQUENCE IF NOT EXISTS {{sequence}} AS bigint MINVALUE -9223372036854775808 START WITH 0 OWNED BY {{table}}.{{id}}
