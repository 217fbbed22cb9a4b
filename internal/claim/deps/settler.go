package deps

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// Wrap gives each job a settler that releases its children once its ack
// has committed and applies their policies once its park has (see
// Releaser). It keeps the optional interfaces of the form's settler.
func (r *Releaser) Wrap(jobs []*contract.Job) {
	for _, j := range jobs {
		j.Settler = r.wrap(j.Settler, j.ID)
	}
}

func (r *Releaser) wrap(s contract.Settler, id int64) contract.Settler {
	w := &parent{Settler: s, r: r, id: id}
	_, async := s.(contract.AsyncAcker)
	_, holder := s.(contract.Holder)
	switch {
	case async && holder:
		return &parentAsyncHolder{parentAsync{w}}
	case async:
		return &parentAsync{w}
	case holder:
		return &parentHolder{w}
	}
	return w
}

// Unwrap returns the form's own settler of a job whose children wait.
func Unwrap(s contract.Settler) contract.Settler {
	if w, ok := s.(interface{ unwrapDeps() *parent }); ok {
		return w.unwrapDeps().Settler
	}
	return s
}

// HandedOff tells the settler of a row whose handler published a row
// waiting for it alone, in the transaction its ack commits in, that the
// settlement need not wait for its release: that row is available at the
// commit, and the release (of any other children) is queued without being
// waited for (see Releaser.AckedLater), its wake enough for them. s is the settler under a limit's
// slot; one without a release is left as it is.
func HandedOff(s contract.Settler) {
	if w, ok := s.(interface{ unwrapDeps() *parent }); ok {
		w.unwrapDeps().handedOff = true
	}
}

// parent is the settler of a row that may have children.
type parent struct {
	contract.Settler
	r         *Releaser
	id        int64
	handedOff bool // see HandedOff
}

func (p *parent) unwrapDeps() *parent { return p }

func (p *parent) Ack(ctx context.Context) error {
	err := p.Settler.Ack(ctx)
	switch {
	case err != nil:
	case p.handedOff:
		p.r.AckedLater(p.id)
	default:
		done := make(chan struct{})
		p.r.Acked(p.id, func() { close(done) })
		<-done
	}
	return err
}

func (p *parent) Park(ctx context.Context, lastError string) error {
	err := p.Settler.Park(ctx, lastError)
	if err == nil {
		if perr := p.r.Parked(ctx, p.id, lastError); perr != nil {
			// The sweep applies them later.
			p.r.cfg.Log.Warn("inbox: could not apply the policies of the rows that wait for a parked row; a sweep applies them within seconds", "table", p.r.cfg.Table, "id", p.id, "err", perr)
		}
	}
	return err
}

func (p *parent) Forget() {
	if f, ok := p.Settler.(contract.Forgetter); ok {
		f.Forget()
	}
}

type parentAsync struct{ *parent }

func (p *parentAsync) AckAsync(done func(error)) {
	p.Settler.(contract.AsyncAcker).AckAsync(func(err error) {
		if err != nil {
			done(err)
			return
		}
		if p.handedOff {
			p.r.AckedLater(p.id)
			done(nil)
			return
		}
		p.r.Acked(p.id, func() { done(nil) })
	})
}

type parentHolder struct{ *parent }

func (p *parentHolder) Hold() context.Context { return p.Settler.(contract.Holder).Hold() }

type parentAsyncHolder struct{ parentAsync }

func (p *parentAsyncHolder) Hold() context.Context { return p.Settler.(contract.Holder).Hold() }
