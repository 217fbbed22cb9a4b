package dialect

import "strconv"

// The statements of the lock store (lock/), every dialect, in one place
// (MariaDB's and MySQL's acquisition in lockmysql.go).
//
// The table (migrations/*/lock.sql) keeps one row per held place, primary key
// (namespace, name, slot) with slot below the caller's max holders, so the
// key itself caps the holders. A release deletes its row and the store's
// sweep deletes the rows of expired holds, so the table holds the live holds
// and those that ended since the last sweep, never a row per name ever used.
// Postgres writes expiries with the database's now(); SQLite, which has no
// clock of its own worth the name, takes now as a parameter in Unix
// milliseconds.
//
// Fencing numbers outlive the rows, so they come from the table, not the
// name: on Postgres a sequence (LockFenceSequence), drawn under a
// transaction-level advisory lock of the name, so that an acquisition that
// commits before another draws its number draws a smaller one (without it a
// statement could draw its number, stall, and insert after a whole hold of
// the name by another that drew a greater one); on SQLite, with one writer
// at a time, one more than the table's greatest fence, whose row the sweep
// and releases keep.

// LockTable is the lock store's table.
const LockTable = "sqlinbox_locks"

// LockFenceSequence (Postgres) numbers the acquisitions of every lock.
const LockFenceSequence = "sqlinbox_locks_fence"

// lockNameSeed seeds the hash of a lock's namespace and name into the key of
// the advisory lock its acquisitions take (the one-bigint form; the claim
// forms' advisory locks use the two-int form, a key space of its own).
const lockNameSeed int64 = 0x6c6f636b // "lock"

// LockChannel is the Postgres NOTIFY channel of lock releases; the payload
// is the lock's wake key.
const LockChannel = "sqlinbox_locks"

// LockSweepBatch bounds the rows one sweep statement deletes, so that a
// sweep never holds SQLite's write lock, or many row locks, for long.
const LockSweepBatch = 1000

// LockSQL is every statement of the lock store, written once for one
// engine. Each is a type whose Call takes its parameters by name and type
// (lockargs.go); the placeholders are the order of each Call.
type LockSQL struct {
	// Acquire takes a free place in one statement. Postgres: one row of
	// slot and fence (NULL when not taken), whether a free place was seen
	// (a race lost when it was and none was taken), and the microseconds
	// until the nearest live holder's expiry (NULL when none). SQLite: a
	// row of slot and fence when taken, none otherwise (then ask Nearest).
	Acquire LockAcquireSQL
	// Nearest (SQLite; "" on Postgres) answers the milliseconds until the
	// nearest live holder's expiry, NULL when none.
	Nearest LockNearestSQL
	// Extend makes a live place last ttl from now; it returns the fence,
	// no row when the place is not live with that secret.
	Extend LockExtendSQL
	// Release frees a live place; it returns a row when it freed one.
	// Postgres: it deletes the row and notifies LockChannel with the wake
	// key, delivered at commit. SQLite: it deletes the row unless it holds
	// the table's greatest fence (see ReleaseKeep).
	Release LockReleaseSQL
	// ReleaseKeep (SQLite; "" on Postgres) frees a live place keeping its
	// row, for the one row Release keeps: the table's greatest fence.
	ReleaseKeep LockReleaseSQL
	// Sweep deletes up to LockSweepBatch rows of holds that have ended;
	// run it again while it deletes a full batch. Concurrent sweeps skip
	// each other's rows (Postgres); SQLite keeps the row of the table's
	// greatest fence.
	Sweep LockSweepSQL
	// Probe reads at most one row of the table: the store's check that the
	// table is there and readable.
	Probe PlainSQL
	// MySQL is the acquisition's statements on MariaDB and MySQL (zero
	// elsewhere), where Acquire and Nearest are "" and Extend, Release and
	// Sweep answer rows affected (and Extend its fence as LastInsertId), not
	// rows.
	MySQL MySQLLockSQL
}

// Lock writes the lock store's statements.
func (d *Dialect) Lock() LockSQL {
	x := func(sql string) text { return text{sql: sql, kind: d.Kind} }
	if d.Kind == MySQL {
		s := LockSQL{Probe: PlainSQL{x("SELECT COUNT(*) FROM (SELECT 1 FROM " + LockTable + " LIMIT 1) AS t")}}
		d.mysqlLock(&s, func(sql string) text { return d.text(sql, Times{}) })
		return s
	}
	s := LockSQL{
		Acquire: LockAcquireSQL{x(d.lockAcquire())},
		Extend:  LockExtendSQL{x(d.lockExtend())},
		Release: LockReleaseSQL{x(d.lockRelease())},
		Sweep:   LockSweepSQL{x(d.lockSweep())},
		Probe:   PlainSQL{x("SELECT COUNT(*) FROM (SELECT 1 FROM " + LockTable + " LIMIT 1) AS t")},
	}
	if d.Kind == SQLite {
		s.Nearest = LockNearestSQL{x(d.lockNearest())}
		s.ReleaseKeep = LockReleaseSQL{x(d.lockReleaseKeep())}
	}
	return s
}

// lockAcquire (see LockSQL.Acquire): on Postgres it looks for the lowest
// free slot from the slot given up, else the lowest below it.
func (d *Dialect) lockAcquire() string {
	if d.Kind == Postgres {
		return `WITH name_lock AS (
    SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2, ` + strconv.FormatInt(lockNameSeed, 10) + `))
), free AS (
    SELECT s.slot FROM generate_series(0, $5::int - 1) AS s(slot), name_lock
    WHERE NOT EXISTS (
        SELECT 1 FROM ` + LockTable + ` l
        WHERE l.namespace = $1 AND l.name = $2 AND l.slot = s.slot AND l.expires_at > now())
    ORDER BY s.slot < $6::int, s.slot LIMIT 1
), took AS (
    INSERT INTO ` + LockTable + ` AS l (namespace, name, slot, token, fence, expires_at)
    SELECT $1, $2, free.slot, $3, nextval('` + LockFenceSequence + `'), now() + $4::bigint * interval '1 microsecond'
    FROM free
    ON CONFLICT (namespace, name, slot) DO UPDATE
        SET token = excluded.token, fence = nextval('` + LockFenceSequence + `'), expires_at = excluded.expires_at
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
SELECT $1, $2, slots.slot, $3, (SELECT COALESCE(MAX(fence), 0) + 1 FROM ` + LockTable + `), $4 + $5
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

// lockNearest: see LockSQL.Nearest.
func (d *Dialect) lockNearest() string {
	return d.Rebind(`SELECT MIN(expires_at) - $3 FROM ` + LockTable + `
WHERE namespace = $1 AND name = $2 AND slot >= 0 AND slot < $4 AND expires_at > $3`)
}

// lockExtend: see LockSQL.Extend.
func (d *Dialect) lockExtend() string {
	if d.Kind == Postgres {
		return `UPDATE ` + LockTable + ` SET expires_at = now() + $5::bigint * interval '1 microsecond'
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > now()
RETURNING fence`
	}
	return d.Rebind(`UPDATE ` + LockTable + ` SET expires_at = $6 + $5
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > $6
RETURNING fence`)
}

// lockRelease: see LockSQL.Release.
func (d *Dialect) lockRelease() string {
	if d.Kind == Postgres {
		return `WITH freed AS (
    DELETE FROM ` + LockTable + `
    WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > now()
    RETURNING 1
)
SELECT pg_notify('` + LockChannel + `', $5) FROM freed`
	}
	return d.Rebind(`DELETE FROM ` + LockTable + `
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > $5
    AND fence < (SELECT MAX(fence) FROM ` + LockTable + `)
RETURNING 1`)
}

// lockReleaseKeep: see LockSQL.ReleaseKeep.
func (d *Dialect) lockReleaseKeep() string {
	return d.Rebind(`UPDATE ` + LockTable + ` SET token = '', expires_at = 0
WHERE namespace = $1 AND name = $2 AND slot = $3 AND token = $4 AND expires_at > $5
RETURNING 1`)
}

// lockSweep: see LockSQL.Sweep.
func (d *Dialect) lockSweep() string {
	if d.Kind == Postgres {
		return `DELETE FROM ` + LockTable + ` WHERE ctid IN (
    SELECT ctid FROM ` + LockTable + ` WHERE expires_at <= now()
    LIMIT ` + strconv.Itoa(LockSweepBatch) + ` FOR UPDATE SKIP LOCKED)`
	}
	return d.Rebind(`DELETE FROM ` + LockTable + ` WHERE (namespace, name, slot) IN (
    SELECT namespace, name, slot FROM ` + LockTable + `
    WHERE expires_at <= $1 AND fence < (SELECT MAX(fence) FROM ` + LockTable + `)
    LIMIT ` + strconv.Itoa(LockSweepBatch) + `)`)
}
