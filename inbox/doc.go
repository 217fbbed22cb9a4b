// Package inbox makes a table in your own database a work queue: producers
// insert rows (with Publish, PublishTx, or plain SQL), and a service claims
// each row, runs your handler on it, and deletes it once the handler
// returns nil. It runs on SQLite (modernc.org/sqlite) and Postgres (pgx v5),
// on a pool you open here or one you already have.
//
// # The first call
//
// A Broker is the door to the database; a Service runs the handlers:
//
//	b, err := inbox.Open("postgres://app@db:5432/app") // or inbox.New(yourPool)
//	svc := inbox.NewService("invoices", "1.0.0", b)
//	svc.OnStart(func(ctx context.Context) error { return migrations.Apply(ctx, b.DB(), "invoice_jobs") })
//	inbox.Handle(svc, inbox.MustQueue[RenderInvoice]("invoice_jobs"), render, inbox.Workers(4))
//	err = svc.Run(ctx) // until ctx is done, or SIGINT or SIGTERM
//
// Elsewhere, in the transaction that writes the business row:
//
//	id, err := inbox.PublishTx(ctx, b, tx, queue, RenderInvoice{Payload: body})
//
// A Queue names the table and, through struct tags, its columns' roles:
// id, locked_until and payload are required; group, attempts, last_error,
// created_at, key and priority are optional (see Role). migrations.Apply
// creates the reference table. Before its first claim a subscription checks
// the table and refuses one it cannot serve with a *TableError that carries
// the DDL that fixes it.
//
// # A row's life
//
// A row's state is read from its locked_until column alone:
//
//	NULL, or at or before now   available
//	after now                   claimed, or waiting (a retry's backoff, a Delay or At publish)
//	9999-12-31                  parked: kept, never claimed until Unpark
//	(row gone)                  acknowledged
//
// A claim takes available rows (lower priority first where the table has a
// priority column), at most one per free worker (under a backlog on
// Postgres a few more, which wait in the process for a worker), and holds
// each while its handler runs. The
// handler's return settles the row: nil deletes it; an error or a panic
// makes it a retry after a backoff, with the error in last_error; after
// MaxAttempts attempts it is parked, never dropped. Count, ListParked and
// Unpark read and change a queue by its Go type; an Operator does the same by
// table name, as the inbox command and the dashboard do. Operator.Cancel
// stops a row wherever it is: a handler running it on any registered
// instance sees its context end with ErrCanceled, and the row is parked
// (or deleted) whatever the handler returns.
//
// # Forms
//
// How a claim holds its rows is its form, picked with the Form option:
//
//   - lease.Form (the default; SQLite and Postgres) writes now+Lease into
//     locked_until and extends it while the handler runs; no connection is
//     held, and a row whose holder died comes back when its lease runs out.
//   - rowlock.Form (Postgres) holds each row under a row lock in an open
//     transaction: one pool connection per job in work.
//   - advisory.Form (Postgres) holds rows under session advisory locks: one
//     pinned connection per claim batch.
//
// Every settlement is fenced on what the claim wrote or holds, so a handler
// whose hold was lost changes nothing. In the row-lock and advisory forms a
// lost connection ends the handler's context with cause ErrHoldLost; a
// lease taken over ends it with ErrLeaseLost, a handler past its Timeout
// with ErrTimeout, and an operator's cancel with ErrCanceled (see
// context.Cause).
//
// # Outcomes
//
// A handler picks an outcome other than ack or retry by what it returns,
// and middleware can find each with errors.As:
//
//   - RetryAfter(d, err) comes back after d, of the handler's choosing, with
//     err as its last error; the attempt counts (*RetryError).
//   - Park(err) parks the row now, whatever attempts are left: for input that
//     will never succeed (*ParkError).
//   - Snooze(d) comes back after d without using an attempt: attempts and
//     last error stay as they were before the claim (*SnoozeError).
//
// Any other error is retried after the subscription's Backoff: by default
// DefaultBackoff (one second doubled per failure, capped at MaxBackoff) less
// a jitter of up to a quarter, so rows that failed together do not come back
// together. Observe and Service hooks report each handling as an Event with
// its Outcome (Acked, Retried, Parked, Snoozed, Lost, Released, Failed,
// Canceled).
//
// With HandleTx the handler gets a *sql.Tx, and the row's delete commits in
// that transaction: an effect written to the same database happens once per
// row, although rows are delivered at least once.
//
// # Attempts are counted at claim
//
// Where the table has an attempts column, a claim adds one to it before the
// handler runs, so a handling whose process is killed, or whose handler
// never returns, counts too: a row claimed more than MaxAttempts times is
// parked without running its handler again. A snooze, and a row given back
// unstarted at shutdown, return the attempt. Event.Attempt is the count this
// handling's claim left. Without an attempts column rows are retried, with
// capped backoff, for ever.
//
// # Wake-ups
//
// A publish through the broker wakes the queue's subscriptions in this
// process at once. Rows written by another process or by plain SQL are seen
// at the next poll (PollInterval, default DefaultPollInterval, one second),
// or at once on Postgres with ListenNotify (and, for plain SQL, the trigger
// migrations.ApplyNotifyTrigger installs). While claims come back full a
// subscription claims again without waiting, so a backlog drains without a
// pause. Without notifications a PublishTx on Postgres wakes this process
// before your commit: call Broker.Wake after committing. Broker.Wake is also
// the call after a transaction that wrote rows by plain SQL.
//
// # Stopping
//
// When Service.Run's context ends (or a signal arrives, with Service.Signals),
// each subscription claims no more, gives back the rows it claimed but had not
// started, and lets running handlers finish within ShutdownTimeout. A
// database that cannot be reached is waited for with backoff; one that
// refuses the connection for good stops Run with a *ConnectionError.
//
// # Fair shares
//
// A subscription to the whole table takes rows in id order, so one tenant's
// backlog holds up every row published after it. With FairBy("tenant") its
// claims take the column's values in turn: a backlog under one value delays
// a row of another by about one claim (docs/flow-control.md).
//
// # Options
//
// Open, New, Subscribe, Register and the publishes take functional options
// (PollInterval, Workers, Lease, Delay, ...); leave one out for its default.
// Each option's doc states its default and its bound. A value out of its
// bound fails the call at once with an error naming the option, the value
// and the bound, wrapping ErrInvalid: lock, schedule and dashboard refuse
// with the same value.
//
// # Where to go next
//
//   - [github.com/sqlinbox/sqlinbox/claim] and the packages below it: the forms
//     and what each costs.
//   - [github.com/sqlinbox/sqlinbox/lock]: keep a piece of work to one holder,
//     or a few, across instances.
//   - [github.com/sqlinbox/sqlinbox/schedule]: periodic work on one instance,
//     every instance, or every worker.
//   - [github.com/sqlinbox/sqlinbox/dashboard]: a web page of every registered
//     queue (see Service.Register), to unpark, pause and resume.
//   - [github.com/sqlinbox/sqlinbox/inboxotel]: OpenTelemetry metrics and a
//     span per handling, built on Hooks.
//   - [github.com/sqlinbox/sqlinbox/inboxtest]: a database per test, a fake
//     clock the test advances, and a recorder that asserts each row was
//     handled once; its package example is a complete test of a handler.
//
// The examples of this package run on SQLite in memory: a service
// (ExampleService), publishing in a transaction (ExamplePublishTx), retry
// and park (ExampleRetryAfter), picking a form (ExampleForm), and an
// operated queue (ExampleService_Register).
package inbox
