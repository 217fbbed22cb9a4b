package dialect

// The statements of the lock store (lock/), both dialects, in one place.
//
// The table (migrations/*/lock.sql) keeps one row per holder place, primary
// key (namespace, name, slot) with slot below the caller's max holders, so the
// key itself caps the holders. A released place keeps its row with an expiry
// in the past. Postgres writes expiries with the database's now(); SQLite,
// which has no clock of its own worth the name, takes now as a parameter in
// Unix milliseconds.
//
// Fencing numbers: on Postgres a counter row at slot -1 is bumped in the
// same statement that takes a place (its row lock orders concurrent takers);
// on SQLite, with one writer at a time, the number is one more than the
// greatest of the name's rows, which releases never remove.

// LockTable is the lock store's table.
const LockTable = "sqlinbox_locks"

// LockChannel is the Postgres NOTIFY channel of lock releases; the payload
// is the lock's wake key.
const LockChannel = "sqlinbox_locks"

// LockAcquire takes the lowest free place in one statement.
//
// Postgres: $1 namespace, $2 name, $3 secret, $4 ttl in microseconds, $5 max
// holders, $6 the slot to look from (the lowest free slot from $6 up, else
// the lowest below it: 0 asks for the lowest free slot); one row: slot and fence (NULL when not taken), whether a free
// place was seen (a race lost when it was and none was taken), and the
// microseconds until the nearest live holder's expiry (NULL when none).
//
// SQLite: $1 namespace, $2 name, $3 secret, $4 now in Unix ms, $5 ttl in ms,
// $6 max holders; a row of slot and fence when taken, none otherwise (then
// ask LockNearest).
func (d *Dialect) LockAcquire() string {
	if d.Kind == Postgres {
		return `WITH free AS (
    SELECT s.slot FROM generate_series(0, $5::int - 1) AS s(slot)
    WHERE NOT EXISTS (
        SELECT 1 FROM ` + LockTable + ` l
        WHERE l.namespace = $1 AND l.name = $2 AND l.slot = s.slot AND l.expires_at > now())
    ORDER BY s.slot < $6::int, s.slot LIMIT 1
), counter AS (
    INSERT INTO ` + LockTable + ` AS l (namespace, name, slot, fence, expires_at)
    SELECT $1, $2, -1, 1, 'infinity' FROM free
    ON CONFLICT (namespace, name, slot) DO UPDATE SET fence = l.fence + 1
    RETURNING fence
), took AS (
    INSERT INTO ` + LockTable + ` AS l (namespace, name, slot, token, fence, expires_at)
    SELECT $1, $2, free.slot, $3, counter.fence, now() + $4::bigint * interval '1 microsecond'
    FROM free, counter
    ON CONFLICT (namespace, name, slot) DO UPDATE
        SET token = excluded.token, fence = excluded.fence, expires_at = excluded.expires_at
        WHERE l.expires_at <= now()
    RETURNING slot, fence
)
SELECT took.slot, took.fence, EXISTS (SELECT 1 FROM free),
    (SELECT floor(extract(epoch FROM min(l.expires_at) - now()) * 1000000)::bigint
       FROM ` + LockTable + ` l
      WHERE l.namespace = $1 AND l.name = $2 AND l.slot >= 0 AND l.slot < $5 AND l.expires_at > now())
FROM (SELECT 1) AS one LEFT JOIN took ON true`
	}
	return d.Rebind(`WITH RECURSIVE slots(slot) AS (
    SELECT 0 UNION ALL SELECT slot + 1 FROM slots WHERE slot + 1 < $6
)
INSERT INTO ` + LockTable + ` (namespace, name, slot, token, fence, expires_at)
SELECT $1, $2, slots.slot, $3,
    (SELECT COALESCE(MAX(fence), 0) + 1 FROM ` + LockTable + ` WHERE namespace = $1 AND name = $2),
    $4 + $5
FROM slots
WHERE NOT EXISTS (
    SELECT 1 FROM ` + LockTable + ` l
    WHERE l.namespace = $1 AND l.name = $2 AND l.slot = slots.slot AND l.expires_at > $4)
LIMIT 1
ON CONFLICT (namespace, name, slot) DO UPDATE
    SET token = excluded.token, fence = excluded.fence, expires_at = excluded.expires_at
    WHERE ` + LockTable + `.expires_at <= $4
RETURNING slot, fence`)
}

// LockNearest (SQLite) answers the milliseconds until the nearest live
// holder's expiry, NULL when none: $1 namespace, $2 name, $3 now in Unix ms,
// $4 max holders.
func (d *Dialect) LockNearest() string {
	return d.Rebind(`SELECT MIN(expires_at) - $3 FROM ` + LockTable + `
WHERE namespace = $1 AND name = $2 AND slot >= 0 AND slot < $4 AND expires_at > $3`)
}

// LockExtend makes a live place last ttl from now; it returns the fence, no
// row when the place is not live with that secret.
//
// Postgres: $1 namespace, $2 name, $3 slot, $4 secret, $5 ttl in µs.
// SQLite: the same and $6 now in Unix ms, $5 ttl in ms.
func (d *Dialect) LockExtend() string {
	if d.Kind == Postgres {
		return `UPDATE ` + LockTable + ` SET expires_at = now() + $5::bigint * interval '1 microsecond'
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > now()
RETURNING fence`
	}
	return d.Rebind(`UPDATE ` + LockTable + ` SET expires_at = $6 + $5
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > $6
RETURNING fence`)
}

// LockRelease frees a live place, keeping its row (and so its fence); it
// returns a row when it freed one. On Postgres it also notifies LockChannel
// with the wake key, delivered at commit.
//
// Postgres: $1 namespace, $2 name, $3 slot, $4 secret, $5 wake key.
// SQLite: $1 namespace, $2 name, $3 slot, $4 secret, $5 now in Unix ms.
func (d *Dialect) LockRelease() string {
	if d.Kind == Postgres {
		return `WITH freed AS (
    UPDATE ` + LockTable + ` SET token = '', expires_at = '-infinity'
    WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > now()
    RETURNING 1
)
SELECT pg_notify('` + LockChannel + `', $5) FROM freed`
	}
	return d.Rebind(`UPDATE ` + LockTable + ` SET token = '', expires_at = 0
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > $5
RETURNING 1`)
}
