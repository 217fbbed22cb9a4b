package claim

import (
	"context"
	"database/sql"
)

// TxAcker is a Settler that can acknowledge its row inside the caller's
// transaction, so a handler's writes and the row's delete commit together
// or not at all.
//
// AckTx runs the row's fenced delete in tx and returns ErrLost when it
// found nothing (the lease was taken over): the caller must then roll tx
// back. Once AckTx returned nil the settler takes the row as acked by tx:
// a later Ack changes nothing and returns nil, and an extension sends
// nothing. If tx does not commit after all, the caller calls TxAborted
// before settling the job otherwise.
type TxAcker interface {
	AckTx(ctx context.Context, tx *sql.Tx) error
	TxAborted()
}

// TxLender is a Settler whose hold is a transaction a handler may write
// in (the row-lock form): its Ack deletes the row and commits that
// transaction, so the handler's writes commit with the ack; its Retry,
// Park or Snooze commit too, so a failed handler's writes must be rolled
// back to a savepoint first. LendTx stops the form's own use of the
// connection until the job is settled.
type TxLender interface {
	LendTx() *sql.Tx
}

// TxBeginner is a TxAcker whose hold is a session (the advisory form):
// the handler's transaction must run on the connection that holds the
// row's lock, so that the lock cannot end (and another session take the
// row) while the transaction may still commit. BeginTx opens it there and
// keeps the form's own statements off the connection; EndTx, called once
// tx has committed or rolled back, gives the connection back to them.
type TxBeginner interface {
	TxAcker
	BeginTx(ctx context.Context) (*sql.Tx, error)
	EndTx()
}
