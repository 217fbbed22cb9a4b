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
