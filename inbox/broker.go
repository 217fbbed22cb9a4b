package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/config"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// DefaultPollInterval is how long a subscription waits after a claim that
// came back short before it claims again, unless woken first.
const DefaultPollInterval = time.Second

// Broker is one service instance's door to a database: it holds the pool,
// the clock, the poll interval and the wake-ups of every subscription and
// publish made through it.
type Broker struct {
	db      *sql.DB
	d       *dialect.Dialect
	owns    bool // the broker opened db and closes it
	poll    time.Duration
	clock   clock.Clock
	log     *slog.Logger
	hub     *notify.Hub
	maxConn int // the pool's size; 0 when unbounded
	budget  *claim.Budget
	stmts   *dialect.Stmts
	writer  *dialect.Writer
	trace   func(context.Context) string // WithTraceContext's; nil for none

	listener     *notify.Listener
	stopListener context.CancelFunc
	listenerDone chan struct{}
	notifies     bool    // publishes send pg_notify (ListenNotify)
	listenDB     *sql.DB // ListenURL's pool, the broker's to close; nil for none
	pickup       Pickup

	mu        sync.Mutex
	inserts   map[string]insert        // publish statements by table and row type
	encodings map[string]dialect.Times // locked_until encodings by table
	batches   sync.Map                 // PublishMany's plans (batchPlan) by table, row type and grouping
	pollers   sync.Map                 // idle pollers (*engine.Poller) by table (see pollers.go)
	sqls      sync.Map                 // each table's statements (dialect.InboxSQL), see pollers.go
	checking  map[any]*checkCall       // table checks in flight (see checkShared)
	histories map[string]*tableHistory // tables' histories by table (see History)
	deps      map[string]*tableDeps    // tables' edges by table (see After)
	sweeps    map[string]*bgLoop       // tables' sweeps for stranded edges (depssweep.go)
	// checkpoints are the background checkpoints of SQLite's log while
	// subscriptions run (checkpoint.go), checkpointRounds their signal to
	// tests; wal says the database is in WAL mode, read once.
	checkpoints      *bgLoop
	checkpointRounds chan struct{}
	walOnce          sync.Once
	wal              bool
}

// ErrInvalid is wrapped by every refusal of an option's value or of an
// argument at construction (Open, New, Subscribe, Register, publishes): the
// error names the option, the value and the bound. It is the module's one
// error of refused input: lock.ErrInvalid and schedule.ErrInvalid are the
// same value.
var ErrInvalid = config.ErrInvalid

// Option configures a Broker. A value out of its bound makes Open or New
// fail with an error wrapping ErrInvalid.
type Option func(*brokerConfig) error

type brokerConfig struct {
	poll     time.Duration
	clock    clock.Clock
	log      *slog.Logger
	hub      *notify.Hub
	notify   bool
	maxConns int
	trace    func(context.Context) string
	listen   string // ListenURL's
}

// PollInterval sets how long a subscription waits after a short claim before
// it claims again when nothing wakes it. Default: DefaultPollInterval
// (1s). Bound: positive.
func PollInterval(d time.Duration) Option {
	return func(c *brokerConfig) error {
		if d <= 0 {
			return fmt.Errorf("inbox: %w: PollInterval(%v); give a positive duration, or leave the option out for the default %v", ErrInvalid, d, DefaultPollInterval)
		}
		c.poll = d
		return nil
	}
}

// WithClock sets the clock every statement takes its times from:
// clock.Database makes the database's now() decide; a *clock.Fake drives
// tests without sleeping. Default: clock.Host. Bound: not nil.
func WithClock(c clock.Clock) Option {
	return func(cfg *brokerConfig) error {
		if c == nil {
			return fmt.Errorf("inbox: %w: WithClock(nil); give a clock, or leave the option out for clock.Host", ErrInvalid)
		}
		cfg.clock = c
		return nil
	}
}

// WithLogger sets the logger. A claim loop logs nothing per job at Info.
// Default: slog.Default(). Bound: not nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *brokerConfig) error {
		if l == nil {
			return fmt.Errorf("inbox: %w: WithLogger(nil); give a logger, or leave the option out for slog.Default()", ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// WithHub sets the in-process hub publishes wake. Default: notify.Default,
// shared by every broker of the process. Bound: not nil.
func WithHub(h *notify.Hub) Option {
	return func(c *brokerConfig) error {
		if h == nil {
			return fmt.Errorf("inbox: %w: WithHub(nil); give a hub, or leave the option out for notify.Default", ErrInvalid)
		}
		c.hub = h
		return nil
	}
}

// ListenNotify turns on Postgres LISTEN/NOTIFY wake-ups: the broker keeps
// one connection of its pool for its whole life to listen on the channel of
// every subscribed table, and each publish sends pg_notify(table, group)
// right after its write (Publish marks the group with its hub, whose
// listener then skips it: see notify.Hub.Stamp). Default: off. Bound:
// Postgres only, and a pool of at least 3 connections (one is the
// listener's); refused otherwise.
func ListenNotify() Option {
	return func(c *brokerConfig) error { c.notify = true; return nil }
}

// MaxConns sets the size of a pool the broker opens from a URL. Pools
// passed to New keep the size their owner gave them. Default: 4 plus one per
// core, at least 8 on Postgres; 4 on SQLite. Bound: at least 2 (one for
// claims, one for settlements and publishes).
func MaxConns(n int) Option {
	return func(c *brokerConfig) error {
		if n < 2 {
			return fmt.Errorf("inbox: %w: MaxConns(%d); give at least 2 (one for claims, one for settlements and publishes)", ErrInvalid, n)
		}
		c.maxConns = n
		return nil
	}
}

// WithTraceContext makes every publish through the broker (Publish,
// PublishTx, PublishMany, PublishManyTx) write f(ctx), its context's trace
// context as a W3C traceparent, into the column its struct tags
// inbox:"trace", where the row's field leaves it empty; "" writes NULL.
// inboxotel.Traceparent is such an f. The trace column reaches
// Hooks.Started, whose inboxotel span links to the producer's. Default: no
// trace context is written. Bound: not nil.
func WithTraceContext(f func(ctx context.Context) string) Option {
	return func(c *brokerConfig) error {
		if f == nil {
			return fmt.Errorf("inbox: %w: WithTraceContext(nil); give a function, or leave the option out", ErrInvalid)
		}
		c.trace = f
		return nil
	}
}

// Open opens a broker on a database URL:
//
//	postgres://user@host:5432/db   as pgx takes it
//	mysql://user:pass@host:3306/db MariaDB or MySQL (go-sql-driver/mysql)
//	sqlite:///var/lib/app/jobs.db  an absolute path; sqlite://jobs.db a relative one
//	sqlite://:memory:              a fresh in-memory database
//	sqlite://:memory:NAME          a named in-memory database every pool of the process shares
//
// The broker owns the pool it opened: Close closes it.
//
// On Postgres, Open learns at once what stands between it and the server
// (one extra connection and round trip; more behind a pooler): behind a
// pooler such as PgBouncer its connections skip pgx's statement cache,
// which a pooler in transaction mode breaks; there the advisory form is
// refused at Subscribe and notifications need ListenURL (see Pickup). A
// database that does not answer yet does not fail Open.
func Open(url string, opts ...Option) (*Broker, error) {
	db, d, err := dialect.Open(url)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	var cfg brokerConfig
	if err := apply(&cfg, opts); err != nil {
		db.Close()
		return nil, err
	}
	n := cfg.maxConns
	if n == 0 {
		n = d.DefaultPoolSize(runtime.NumCPU())
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	b, err := newBroker(db, d, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	b.owns = true
	return b, nil
}

// OpenDB opens a pool for one of the URLs Open takes, configured as Open
// configures its own: on SQLite, write transactions that begin with BEGIN
// IMMEDIATE, a busy timeout, WAL for files and a bounded page cache; on
// MariaDB and MySQL, times read as time.Time in UTC, sessions in UTC and
// matched rows counted; on Postgres behind a pooler, no statement cache. Use it
// for the pools you hand to lock.NewSQL, schedule.New or New. The pool is
// the caller's: size it with SetMaxOpenConns and close it when done.
func OpenDB(url string) (*sql.DB, error) {
	db, _, err := dialect.Open(url)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return db, nil
}

// New makes a broker on a pool the caller already has and keeps: a
// *sql.DB, a *sqlx.DB or a *pgxpool.Pool. The database is told from the
// driver (modernc.org/sqlite, pgx's stdlib, go-sql-driver/mysql) or,
// through a wrapping driver such as otelsql, from what it answers to select
// version(), select sqlite_version() and select @@version_comment. A SQLite
// pool whose connections have no busy timeout (sql.Open("sqlite", path)) is
// refused, with the DSN that sets one, as is a MySQL pool without
// parseTime=true, loc=UTC, time_zone='+00:00' and clientFoundRows=true:
// open it with OpenDB, or with that DSN. Subscriptions size their claims to the
// pool: they never hold more than its size less one connection. A pgx pool
// behind a pooler in transaction mode whose connections keep pgx's
// statement cache is refused (ErrTransactionPooling), with the setting that
// fixes it.
func New(pool any, opts ...Option) (*Broker, error) {
	var db *sql.DB
	wrapped := false
	switch p := pool.(type) {
	case *sql.DB:
		db = p
	case *sqlx.DB:
		db = p.DB
	case *pgxpool.Pool:
		// A database/sql face on the caller's pool: closing it (Close does)
		// gives its connections back and leaves the pool open.
		db = stdlib.OpenDBFromPool(p)
		db.SetMaxOpenConns(int(p.Config().MaxConns))
		wrapped = true
	default:
		return nil, fmt.Errorf("inbox: %w: New takes a *sql.DB, *sqlx.DB or *pgxpool.Pool, got %T", ErrInvalid, pool)
	}
	var cfg brokerConfig
	if err := apply(&cfg, opts); err != nil {
		if wrapped {
			db.Close() // gives nothing back: no connection was taken
		}
		return nil, err
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	b, err := newBroker(db, d, cfg)
	if err != nil {
		if wrapped {
			db.Close()
		}
		return nil, err
	}
	b.owns = wrapped
	return b, nil
}

func apply(cfg *brokerConfig, opts []Option) error {
	for _, o := range opts {
		if err := o(cfg); err != nil {
			return err
		}
	}
	if cfg.poll == 0 {
		cfg.poll = DefaultPollInterval
	}
	if cfg.clock == nil {
		cfg.clock = clock.Host{}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.hub == nil {
		cfg.hub = notify.Default
	}
	return nil
}

func newBroker(db *sql.DB, d *dialect.Dialect, cfg brokerConfig) (*Broker, error) {
	b := &Broker{db: db, d: d, poll: cfg.poll, clock: cfg.clock, log: cfg.log, hub: cfg.hub, trace: cfg.trace,
		maxConn: db.Stats().MaxOpenConnections, inserts: map[string]insert{}, encodings: map[string]dialect.Times{},
		notifies: cfg.notify, pickup: Pickup{Poll: cfg.poll}}
	pooling, err := b.detectPooling()
	if err != nil {
		return nil, err
	}
	if cfg.notify {
		if err := b.startListener(cfg, pooling); err != nil {
			return nil, err
		}
	}
	b.budget = claim.NewBudget(b.claimConns())
	b.stmts = dialect.NewStmts(b.db, b.d)
	b.writer = dialect.NewWriter(b.d)
	b.checkpointRounds = make(chan struct{}, 1)
	return b, nil
}

// DB returns the broker's pool, for migrations, startup hooks and producers.
func (b *Broker) DB() *sql.DB { return b.db }

// Dialect names the database engine: "sqlite" or "postgres".
func (b *Broker) Dialect() string { return b.d.String() }

// Hub returns the in-process hub the broker's publishes wake.
func (b *Broker) Hub() *notify.Hub { return b.hub }

// Listener returns the broker's Postgres listener, nil unless ListenNotify.
func (b *Broker) Listener() *notify.Listener { return b.listener }

// Close stops the listener and, when the broker opened the pool, closes it.
// A pool passed to New stays open (for a *pgxpool.Pool, only the broker's
// database/sql face on it is closed).
func (b *Broker) Close() error {
	if b.stopListener != nil {
		b.stopListener()
		<-b.listenerDone
	}
	err := b.stmts.Close()
	if b.listenDB != nil {
		err = errors.Join(err, b.listenDB.Close())
	}
	if b.owns {
		return errors.Join(err, b.db.Close())
	}
	return err
}

// claimConns is how many connections the broker's subscriptions may hold at
// once, all together: the pool's size less one (left for handlers,
// settlements and publishes) and less the listener's; at least one.
func (b *Broker) claimConns() int {
	if b.maxConn == 0 {
		return 1 << 20
	}
	n := b.maxConn - 1
	if b.listener != nil && b.listenDB == nil {
		n--
	}
	return max(n, 1)
}

// Wake wakes the subscriptions of queue q's table in this process (and
// group, when q has one) at once. Publish does it itself; call it after
// committing a transaction that wrote rows by plain SQL.
func (b *Broker) Wake(table, group string) {
	b.hub.Wake(table, group)
}
