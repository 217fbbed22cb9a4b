package rowlock

import "database/sql"

// LendTx gives the held transaction to a transactional handler (see
// claim.TxLender). The watch's read of the idle connection stops, since
// the handler's statements need the connection; a connection that ends
// meanwhile fails the handler's statements and the settlement's commit.
func (h *hold) LendTx() *sql.Tx {
	h.watch.Pause()
	return h.tx
}
