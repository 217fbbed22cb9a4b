package engine

// Cancel ends the context of the handler that runs row id here, if one
// does, with cause (an *inboxtype.CancelCause: the row is then parked or
// deleted as it asks, whatever the handler returns). It reports whether a
// handler of id was running.
func (e *Engine) Cancel(id int64, cause error) bool {
	found := false
	for _, w := range e.currentWatches() {
		found = w.cancelIf(id, cause) || found
	}
	return found
}

// Running reports whether a handler runs.
func (e *Engine) Running() bool {
	for _, w := range e.currentWatches() {
		w.mu.Lock()
		running := !w.handled
		w.mu.Unlock()
		if running {
			return true
		}
	}
	return false
}

func (e *Engine) currentWatches() []*watch {
	e.watchMu.Lock()
	defer e.watchMu.Unlock()
	return e.watches
}

// cancelIf ends the context of w's handler with cause if it runs row id.
func (w *watch) cancelIf(id int64, cause error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.handled || w.j == nil || w.j.ID != id {
		return false
	}
	w.cancel(cause)
	return true
}
