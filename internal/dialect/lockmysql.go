package dialect

import (
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The lock store on MariaDB and MySQL, which have neither ON CONFLICT ...
// WHERE nor RETURNING on UPDATE: an acquisition is one READ COMMITTED
// transaction (MySQLLockTx) that locks the name's rows (Places), takes the
// lowest place not live by updating its expired row (Take) or inserting one
// (Insert), and only then draws its fence (Draw) and writes it (SetFence).
// Drawing after the place's row is locked keeps fences growing: a later
// holder of the place waits on that row lock, so it draws a greater number.
// The fence counter is one row (LockFenceTable), locked from the draw to the
// commit, the last statement before it. Expiries run on the store's clock,
// as on SQLite, as DATETIME(6) in UTC.

// LockFenceTable (MariaDB, MySQL) numbers the acquisitions of every lock.
const LockFenceTable = "sqlinbox_locks_fence"

// MySQLLockSQL is the lock store's statements that only MariaDB and MySQL
// run (LockSQL.MySQL); Extend, Release and Sweep are LockSQL's own.
type MySQLLockSQL struct {
	// Places locks the rows of the first maxHolders places of a lock and
	// answers each one's slot and expiry.
	Places LockRowsSQL
	// Take marks a place whose row Places locked as held (slot, token,
	// expiry); the fence is written by SetFence.
	Take LockTakeSQL
	// Insert adds the row of a place that had none; a duplicate key (1062)
	// is a race lost to another taker.
	Insert LockTakeSQL
	// Draw takes the next fence: the statement's LastInsertId.
	Draw PlainSQL
	// SetFence writes a taken place's fence.
	SetFence LockSetFenceSQL
}

// MySQLLockTx is how an acquisition's transaction begins: READ COMMITTED,
// so that Places locks the rows there are and no gaps between them.
func MySQLLockTx() *sql.TxOptions { return &sql.TxOptions{Isolation: sql.LevelReadCommitted} }

func (d *Dialect) mysqlLock(s *LockSQL, x func(string) text) {
	const key = ` WHERE namespace = $1 AND name = $2 AND slot = $3`
	s.MySQL = MySQLLockSQL{
		Places: LockRowsSQL{x(`SELECT slot, expires_at FROM ` + LockTable + `
WHERE namespace = $1 AND name = $2 AND slot < $3 ORDER BY slot FOR UPDATE`)},
		Take:     LockTakeSQL{x(`UPDATE ` + LockTable + ` SET token = $4, expires_at = $5` + key)},
		Insert:   LockTakeSQL{x(`INSERT INTO ` + LockTable + ` (namespace, name, slot, token, fence, expires_at) VALUES ($1, $2, $3, $4, 0, $5)`)},
		Draw:     PlainSQL{x(`UPDATE ` + LockFenceTable + ` SET fence = LAST_INSERT_ID(fence + 1) WHERE id = 1`)},
		SetFence: LockSetFenceSQL{x(`UPDATE ` + LockTable + ` SET fence = $4` + key)},
	}
	// Extend answers the fence as its LastInsertId; both answer the rows
	// matched (the pool counts matched rows: clientFoundRows).
	s.Extend = LockExtendSQL{x(`UPDATE ` + LockTable + ` SET expires_at = $6, fence = LAST_INSERT_ID(fence)` + key + ` AND token = $4 AND expires_at > $5`)}
	s.Release = LockReleaseSQL{x(`DELETE FROM ` + LockTable + key + ` AND token = $4 AND expires_at > $5`)}
	s.Sweep = LockSweepSQL{x(`DELETE FROM ` + LockTable + ` WHERE expires_at <= $1 LIMIT ` + strconv.Itoa(LockSweepBatch))}
}

// LockRowsSQL locks the rows of a lock's places (MySQLLockSQL.Places).
type LockRowsSQL struct{ text }

// Call locks the places below maxHolders of lock (namespace, name).
func (s LockRowsSQL) Call(namespace, name string, maxHolders int) Call {
	return s.call(namespace, name, maxHolders)
}

// LockTakeSQL marks a place held (MySQLLockSQL.Take, Insert).
type LockTakeSQL struct{ text }

// Call marks place slot of lock (namespace, name) held with secret until
// expires.
func (s LockTakeSQL) Call(namespace, name string, slot int, secret string, expires time.Time) Call {
	return s.call(namespace, name, slot, secret, MySQLTime(expires))
}

// LockSetFenceSQL writes a taken place's fence.
type LockSetFenceSQL struct{ text }

// Call writes fence on place slot of lock (namespace, name).
func (s LockSetFenceSQL) Call(namespace, name string, slot int, fence int64) Call {
	return s.call(namespace, name, slot, fence)
}

// MySQLTime is t as a DATETIME(6) takes it: UTC, whole microseconds.
func MySQLTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Duplicate says err is MariaDB's or MySQL's duplicate key (1062).
func Duplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}
