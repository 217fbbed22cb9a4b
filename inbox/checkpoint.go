package inbox

import (
	"context"
	"strings"
	"time"
)

// SQLite in WAL mode copies its log back into the database file at the
// commit that grows the log past 1,000 pages, inside that commit and before
// the broker's next writer takes its turn: every writer queued behind it
// (claims, acks) waits for the copy and its sync, milliseconds at a time.
// While any of its subscriptions runs on a SQLite database in WAL mode, the
// broker also checkpoints in the background, PASSIVE (it takes no write
// lock and waits for no reader), each checkpointEvery in which its writers
// wrote and now rest: the checkpoint at the mark then finds little left to
// copy. checkpointRounds gets a value after each background checkpoint
// (tests wait on it); it never blocks.

// checkpointEvery is how often the background checkpoint runs while the
// broker writes: at 5,000 rows a second with a history, a few hundred
// pages of log each time, under SQLite's mark of 1,000.
const checkpointEvery = 100 * time.Millisecond

// startCheckpoints counts a running subscription and starts the broker's
// checkpoints (SQLite in WAL mode) for the first; the returned function
// uncounts it and, for the last, stops them and waits.
func (b *Broker) startCheckpoints() func() {
	if !b.walMode() {
		return func() {}
	}
	get := func() *bgLoop { return b.checkpoints }
	set := func(l *bgLoop) { b.checkpoints = l }
	return b.holdLoop(get, set, b.checkpointLoop)
}

// walMode says the broker's database is SQLite in WAL mode (read once).
func (b *Broker) walMode() bool {
	b.walOnce.Do(func() {
		if !b.writer.Takes() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var mode string
		if err := b.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err == nil {
			b.wal = strings.EqualFold(mode, "wal")
		}
	})
	return b.wal
}

// checkpointLoop checkpoints every checkpointEvery in which the broker's
// writers took a turn and none holds it now, until ctx ends. It paces
// I/O, so it is host time.
func (b *Broker) checkpointLoop(ctx context.Context) {
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	last := b.writer.Turns()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Only while the writers rest: in a drain that keeps them busy,
		// SQLite's own checkpoint at the mark copies each page once, where
		// checkpoints each tick would copy a page written again and again
		// as often, on the drain's CPU.
		n := b.writer.Turns()
		if n == last || !b.writer.Idle() {
			continue
		}
		last = n
		// A failure (another connection's checkpoint running, a closed
		// pool) leaves the log to SQLite's own checkpoint at its mark.
		if _, err := b.db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil && ctx.Err() == nil {
			b.log.Debug("inbox: background checkpoint failed; SQLite checkpoints at its own mark", "err", err)
		}
		select {
		case b.checkpointRounds <- struct{}{}:
		default:
		}
	}
}
