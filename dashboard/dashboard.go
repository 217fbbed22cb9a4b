// Package dashboard is sqlinbox's web dashboard: an http.Handler that shows
// every registered queue (rows by state, handlings a minute over the last
// hour, instances alive and gone, and a queue nobody consumes), each row in
// full, and lets an operator unpark, delete, run now, pause and resume (a
// change by error text only once its count is confirmed); and the locks
// held in the SQL lock store and the schedules' members, latest moments and
// open shares on the same database, where a schedule's placement can be set
// over its code's. It reads the registry that Service.Register keeps
// (create its tables with migrations.ApplyRegistry), so it needs no column
// names. Pages are rendered on the server with html/template, assets are
// embedded, and counts refresh every few seconds without a reload.
//
// Mount it at any prefix inside your own service, behind your own
// authentication middleware:
//
//	h, err := dashboard.New(broker)
//	mux.Handle("/admin/inbox/", http.StripPrefix("/admin/inbox", requireAdmin(h)))
//
// or run it on its own: go run ./cmd/inbox dashboard --db URL --listen 127.0.0.1:8080.
//
// Every action is a POST carrying a CSRF token (a cookie the page sets and a
// form field that must match it, with a same-origin check); ReadOnly shows no
// action and refuses every POST. Tables and groups an action names must be
// registered queues; values reach SQL as bound parameters.
package dashboard

import (
	"database/sql"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/config"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Option configures New. A value out of its bound makes New fail with an
// error wrapping ErrInvalid that names the option, the value and the bound.
type Option func(*settings) error

// settings are a dashboard's options, defaults filled in.
type settings struct {
	ReadOnly bool
	Refresh  time.Duration
	PageSize int
	Logger   *slog.Logger

	// A state's view reads the key this many rows at a time, for at most
	// this long (see Handler.rows); tests make them small.
	scanWindow int
	scanBudget time.Duration
}

// Defaults of the options.
const (
	DefaultRefresh  = 5 * time.Second
	DefaultPageSize = 50
)

// ErrInvalid is wrapped by New's error for a nil broker or an option out of
// its bound. It is the module's one error of refused input: inbox.ErrInvalid
// is the same value.
var ErrInvalid = config.ErrInvalid

// ReadOnly shows no action buttons and refuses every POST with 403.
// Default: off, actions shown.
func ReadOnly() Option {
	return func(s *settings) error { s.ReadOnly = true; return nil }
}

// Refresh is how often a page reloads its counts in the browser. Default:
// DefaultRefresh (5s). Bound: at least 1s.
func Refresh(d time.Duration) Option {
	return func(s *settings) error {
		if d < time.Second {
			return fmt.Errorf("dashboard: %w: Refresh(%v); give at least 1s, or leave the option out for the default %v", ErrInvalid, d, DefaultRefresh)
		}
		s.Refresh = d
		return nil
	}
}

// PageSize is how many rows a queue page lists. Default: DefaultPageSize
// (50). Bound: 1 to 1000.
func PageSize(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("dashboard: %w: PageSize(%d); give 1 to 1000, or leave the option out for the default %d", ErrInvalid, n, DefaultPageSize)
		}
		s.PageSize = n
		return nil
	}
}

// WithLogger logs failed reads and actions. Default: slog.Default(). Bound:
// not nil.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("dashboard: %w: WithLogger(nil); give a logger, or leave the option out for slog.Default()", ErrInvalid)
		}
		s.Logger = l
		return nil
	}
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Handler serves the dashboard. Make it with New.
type Handler struct {
	cfg     settings
	op      *inbox.Operator
	d       *dialect.Dialect
	dialect string
	db      *sql.DB
	pages   map[string]*template.Template
	static  http.Handler
	mux     *http.ServeMux
}

// New returns the dashboard of broker b's database.
func New(b *inbox.Broker, opts ...Option) (*Handler, error) {
	if b == nil {
		return nil, fmt.Errorf("dashboard: %w: a nil broker; give the broker of the database to show", ErrInvalid)
	}
	cfg := settings{Refresh: DefaultRefresh, PageSize: DefaultPageSize, Logger: slog.Default(), scanWindow: scanWindow, scanBudget: scanBudget}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	d, err := dialect.Detect(b.DB())
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	sub, _ := fs.Sub(staticFiles, "static")
	h := &Handler{cfg: cfg, op: inbox.NewOperator(b), d: d, dialect: b.Dialect(), db: b.DB(), pages: pages, static: http.FileServerFS(sub), mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /queue", h.queue)
	h.mux.HandleFunc("GET /row", h.row)
	h.mux.HandleFunc("GET /locks", h.locks)
	h.mux.HandleFunc("GET /schedules", h.schedules)
	h.mux.HandleFunc("POST /action", h.action)
	h.mux.HandleFunc("POST /schedule-placement", h.placement)
	h.mux.Handle("GET /static/", http.StripPrefix("/static", h.static))
	return h, nil
}

// ServeHTTP serves a page, an asset or an action. Every link is relative,
// so the handler works under any prefix that http.StripPrefix removes; a
// request for the bare prefix is sent to the prefix with a slash.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" {
		w.Header().Set("Location", lastSegment(r)+"/") // relative: see action
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; base-uri 'none'; form-action 'self'")
	h.mux.ServeHTTP(w, r)
}

// lastSegment is the last element of the request's original path, for the
// redirect of a bare prefix ("/admin/inbox" -> "inbox/").
func lastSegment(r *http.Request) string {
	p, _, _ := strings.Cut(r.RequestURI, "?")
	return path.Base(p)
}
