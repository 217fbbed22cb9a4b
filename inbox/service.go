package inbox

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sync"
	"syscall"
)

// Service is one instance of a worker service: a name and version for
// logs, startup hooks, and the subscriptions it runs until told to stop.
//
//	svc := inbox.NewService("invoices", "1.0.0", broker)
//	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, broker.DB(), "invoice_jobs") })
//	inbox.Handle(svc, queue, render, inbox.Workers(4))
//	err := svc.Run(ctx) // until ctx is done, or SIGINT or SIGTERM
type Service struct {
	Name    string
	Version string
	broker  *Broker
	hooks   []func(context.Context) error
	subs    []*Subscription
	// Signals makes Run stop on SIGINT and SIGTERM as well as on its
	// context. Default true; tests that run several instances in one process
	// may turn it off.
	Signals   bool
	started   chan struct{}
	reg       *registry // nil unless Register was called
	callHooks []Hooks   // AddHooks
}

// NewService makes a service on broker b.
func NewService(name, version string, b *Broker) *Service {
	return &Service{Name: name, Version: version, broker: b, Signals: true, started: make(chan struct{})}
}

// Broker returns the service's broker.
func (s *Service) Broker() *Broker { return s.broker }

// OnStart adds a hook that Run calls, in order, before any subscription
// checks its table: create tables there.
func (s *Service) OnStart(hook func(ctx context.Context) error) {
	s.hooks = append(s.hooks, hook)
}

// Add adds subscriptions made with Subscribe.
func (s *Service) Add(subs ...*Subscription) {
	s.subs = append(s.subs, subs...)
}

// Subscriptions returns the service's subscriptions.
func (s *Service) Subscriptions() []*Subscription { return s.subs }

// Handle subscribes h to q on the service's broker and adds it.
func Handle[T any](svc *Service, q Queue[T], h Handler[T], opts ...SubOption) (*Subscription, error) {
	sub, err := Subscribe(svc.broker, q, h, opts...)
	if err != nil {
		return nil, err
	}
	svc.Add(sub)
	return sub, nil
}

// Started is closed once every subscription has checked its table and
// started claiming.
func (s *Service) Started() <-chan struct{} { return s.started }

// Run calls the startup hooks, checks every subscription's table, then runs
// the subscriptions until ctx is done (or, with Signals, SIGINT or SIGTERM
// arrives). On stop each subscription claims no more, gives back rows it
// claimed but had not started, and lets running handlers finish within its
// ShutdownTimeout. A database that cannot be reached yet (refused, reset,
// starting up, shutting down) is waited for with backoff (logged once); a
// connection refused for good (unknown database, role or host, failed
// authentication) stops Run with a *ConnectionError, as does any other
// failure of a hook or a table check, before anything is claimed. When Run
// returns, it has called the Stopped function of every Hooks.
func (s *Service) Run(ctx context.Context) error {
	defer s.stopped()
	if s.Signals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
	}
	log := s.broker.log.With("service", s.Name, "version", s.Version)
	// A database not reachable yet is waited for, with backoff; any other
	// failure of a hook or a table check stops Run before anything is claimed.
	for i, hook := range s.hooks {
		if err := untilReachable(ctx, s.broker, fmt.Sprintf("startup hook %d", i+1), func() error { return hook(ctx) }); err != nil {
			return fmt.Errorf("inbox: service %q: startup hook %d: %w", s.Name, i+1, err)
		}
	}
	var errs []error
	for _, sub := range s.subs {
		if err := untilReachable(ctx, s.broker, "checking table "+sub.table, func() error { return sub.check(ctx) }); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if s.reg != nil {
		s.reg.start(ctx)
		defer s.reg.stop()
	}
	s.decorate()
	log.Info("inbox: service started", "subscriptions", len(s.subs))
	var wg sync.WaitGroup
	runErrs := make([]error, len(s.subs))
	for i, sub := range s.subs {
		wg.Go(func() { runErrs[i] = sub.Run(ctx) })
	}
	close(s.started)
	wg.Wait()
	log.Info("inbox: service stopped")
	return errors.Join(runErrs...)
}
