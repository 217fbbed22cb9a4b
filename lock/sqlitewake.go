package lock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// fileWakes carries release wakes between the processes that share a SQLite
// file, with no server between them: each store binds a Unix datagram socket
// in a directory named after the file, and a release sends the lock's wake
// key to every socket there. A datagram is a hint, as every wake is: a lost
// one costs a waiter its retry delay. The directory is in the system's
// temporary directory (socket paths are short; the file's may not be), made
// for the user alone: processes of other users sharing the file find a freed
// place at their retry delay.
type fileWakes struct {
	dir  string
	self string
	conn *net.UnixConn
	hub  *notify.Hub
	log  *slog.Logger
	done chan struct{}
}

// wakeDir is the directory of the sockets of the SQLite file path.
func wakeDir(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return keyDir(path)
}

// keyDir is the directory of the sockets of the stores that share key (a
// file's real path, or a server's address and database).
func keyDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(os.TempDir(), "sqlinbox-locks-"+hex.EncodeToString(sum[:8]))
}

// listenFileWakes binds this store's socket beside the others of the
// directory dir and carries the wakes it receives into hub until close.
func listenFileWakes(dir string, hub *notify.Hub, log *slog.Logger) (*fileWakes, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	self := filepath.Join(dir, strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b[:])+".sock")
	var conn *net.UnixConn
	var err error
	for range 3 { // the last store of another process may remove the directory between the two calls
		if err = os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: self, Net: "unixgram"})
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	w := &fileWakes{dir: dir, self: self, conn: conn, hub: hub, log: log, done: make(chan struct{})}
	go w.receive()
	w.send("") // an empty datagram wakes nobody; it removes the sockets of processes gone without Close
	return w, nil
}

func (w *fileWakes) receive() {
	defer close(w.done)
	buf := make([]byte, 64)
	for {
		n, _, err := w.conn.ReadFromUnix(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if n > 0 {
			w.hub.Wake(dialect.LockChannel, string(buf[:n]))
		}
	}
}

// send tells every other store of the file that the lock of key was freed.
// A socket nobody reads any more (its process died) is removed.
func (w *fileWakes) send(key string) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return
	}
	msg := []byte(key)
	for _, e := range entries {
		name := filepath.Join(w.dir, e.Name())
		if name == w.self || !strings.HasSuffix(name, ".sock") {
			continue
		}
		_, err := w.conn.WriteToUnix(msg, &net.UnixAddr{Name: name, Net: "unixgram"})
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			_ = os.Remove(name)
		}
	}
}

func (w *fileWakes) close() {
	_ = w.conn.Close()
	<-w.done
	_ = os.Remove(w.self)
	_ = os.Remove(w.dir) // when this was the last store of the file
}

// startFileWakes sets up the wakes between processes for a SQLite store on
// a file; nil for an in-memory database or where Unix sockets fail (the
// store's waiters then find a freed place at their retry delay).
func startFileWakes(ctx context.Context, db *sql.DB, hub *notify.Hub, log *slog.Logger) *fileWakes {
	path, err := dialect.SQLiteFile(ctx, db)
	if err != nil || path == "" {
		return nil
	}
	w, err := listenFileWakes(wakeDir(path), hub, log)
	if err != nil {
		log.Warn("lock: no release wakes between processes on this SQLite file; waiters of other processes find a freed place at their retry delay",
			"file", path, "err", fmt.Sprint(err))
		return nil
	}
	return w
}

// startServerWakes sets up the same wakes for a MariaDB or MySQL store,
// between the processes of this host that use the same server and database
// (named by the server's host name, port and the database); nil where that
// fails (waiters of other processes then find a freed place at their
// retry).
func startServerWakes(ctx context.Context, db *sql.DB, hub *notify.Hub, log *slog.Logger) *fileWakes {
	var host, port, name sql.NullString
	err := db.QueryRowContext(ctx, "SELECT @@hostname, @@port, DATABASE()").Scan(&host, &port, &name)
	if err != nil {
		log.Warn("lock: no release wakes between processes: the server did not say which it is; waiters of other processes find a freed place at their retry delay", "err", fmt.Sprint(err))
		return nil
	}
	key := "mysql:" + host.String + ":" + port.String + "/" + name.String
	w, err := listenFileWakes(keyDir(key), hub, log)
	if err != nil {
		log.Warn("lock: no release wakes between processes on this host; waiters of other processes find a freed place at their retry delay",
			"database", key, "err", fmt.Sprint(err))
		return nil
	}
	return w
}
