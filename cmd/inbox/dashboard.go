package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

func init() { builders = append(builders, addDashboard) }

// dashFlags are the dashboard command's flags.
type dashFlags struct {
	db, listen, basicAuth, prefix string
	readOnly, public              bool
	refresh                       time.Duration
}

func addDashboard(root *cobra.Command) {
	f := &dashFlags{}
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "serve the web dashboard of every registered queue",
		Long: `Serves the dashboard (package dashboard) on its own: every registered queue with its rows
by state and handlings a minute, instances alive and gone, and a page per queue to unpark,
delete, run now, pause and resume. It listens on loopback unless --public is given, and
asks for --basic-auth user:password then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serveDashboard(cmd.Context(), f, cmd) },
	}
	cmd.Flags().StringVar(&f.db, "db", "", "database URL: postgres://... or sqlite:///path.db (required)")
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().BoolVar(&f.public, "public", false, "allow an address other than loopback (then --basic-auth is required)")
	cmd.Flags().StringVar(&f.basicAuth, "basic-auth", "", "user:password every request must carry")
	cmd.Flags().BoolVar(&f.readOnly, "read-only", false, "show no actions and refuse every change")
	cmd.Flags().StringVar(&f.prefix, "prefix", "/", "path prefix to serve under, e.g. /admin/inbox")
	cmd.Flags().DurationVar(&f.refresh, "refresh", dashboard.DefaultRefresh, "how often pages refresh their counts")
	_ = cmd.MarkFlagRequired("db")
	root.AddCommand(cmd)
}

func serveDashboard(ctx context.Context, f *dashFlags, cmd *cobra.Command) error {
	if err := checkListen(f); err != nil {
		return err
	}
	b, err := openDatabase(ctx, f.db, false, 4)
	if err != nil {
		return err
	}
	defer b.Close()
	opts := []dashboard.Option{dashboard.Refresh(f.refresh)}
	if f.readOnly {
		opts = append(opts, dashboard.ReadOnly())
	}
	h, err := dashboard.New(b, opts...)
	if err != nil {
		return err
	}
	prefix := "/" + strings.Trim(f.prefix, "/")
	var handler http.Handler = h
	if prefix != "/" {
		mux := http.NewServeMux()
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
		handler = mux
	}
	if f.basicAuth != "" {
		handler = basicAuth(f.basicAuth, handler)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(cmd.OutOrStdout(), "dashboard of %s on http://%s%s\n", b.Dialect(), ln.Addr(), strings.TrimSuffix(prefix, "/")+"/")
	if d, derr := dialect.Detect(b.DB()); derr == nil && missingRegistry(ctx, b, d) {
		fmt.Fprintf(cmd.OutOrStdout(), "this database has no registry yet, so no queue shows: create it with `inbox migrate-registry --db %s` (or migrations.ApplyRegistry in your service), then start services that call Service.Register\n", dialect.Redact(f.db))
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkListen refuses an address off loopback unless --public and
// --basic-auth are both given.
func checkListen(f *dashFlags) error {
	if f.basicAuth != "" && !strings.Contains(f.basicAuth, ":") {
		return fmt.Errorf("--basic-auth takes user:password")
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	if !f.public {
		return fmt.Errorf("--listen %q is not a loopback address: add --public (with --basic-auth) to serve it beyond this machine", f.listen)
	}
	if f.basicAuth == "" {
		return fmt.Errorf("--public needs --basic-auth user:password: the dashboard changes queues")
	}
	return nil
}

func basicAuth(userPass string, next http.Handler) http.Handler {
	user, pass, _ := strings.Cut(userPass, ":")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="sqlinbox"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// missingRegistry reports whether the registry's tables are not there.
func missingRegistry(ctx context.Context, b *inbox.Broker, d *dialect.Dialect) bool {
	_, err := inbox.NewOperator(b).Instances(ctx)
	return dialect.IsMissingTable(d, err)
}
