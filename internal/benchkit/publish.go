package benchkit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// PublishPayload is every published row's payload: River's no-op job
// args encode to the same two bytes.
var PublishPayload = []byte("{}")

// Published is what a publish run measured.
type Published struct {
	Rows       int
	Seconds    float64
	RowsPerSec float64
	// MachineCPU is the CPU seconds every core spent (see MachineCPU); -1
	// where it cannot be read.
	MachineCPU float64
}

// CPUPerRow is the machine's CPU per row in microseconds, or -1.
func (p Published) CPUPerRow() float64 {
	if p.MachineCPU < 0 || p.Rows <= 0 {
		return -1
	}
	return p.MachineCPU * 1e6 / float64(p.Rows)
}

// timed runs write over an empty reference table and checks it left rows
// rows there.
func timed(ctx context.Context, db *sql.DB, table string, rows int, write func() error) (Published, error) {
	if _, err := Fill(ctx, db, table, 0); err != nil {
		return Published{}, err
	}
	start, cpu0 := time.Now(), MachineCPU()
	if err := write(); err != nil {
		return Published{}, err
	}
	took := time.Since(start)
	p := Published{Rows: rows, Seconds: took.Seconds(), RowsPerSec: float64(rows) / took.Seconds(), MachineCPU: cpuSince(cpu0)}
	var n int
	d, err := dialect.Detect(db)
	if err != nil {
		return Published{}, err
	}
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+d.Quote(table)).Scan(&n); err != nil {
		return Published{}, err
	}
	if n != rows {
		return Published{}, fmt.Errorf("%d rows in %s after writing %d", n, table, rows)
	}
	return p, nil
}

// Publish makes table again, empty, and writes rows rows into it with
// inbox.PublishMany, batch rows a call.
func Publish(ctx context.Context, b *inbox.Broker, table string, rows, batch int) (Published, error) {
	q, err := inbox.NewQueue[Row](table)
	if err != nil {
		return Published{}, err
	}
	return timed(ctx, b.DB(), table, rows, func() error {
		buf := make([]Row, 0, batch)
		for done := 0; done < rows; done += batch {
			buf = buf[:0]
			for range min(batch, rows-done) {
				buf = append(buf, Row{Payload: PublishPayload})
			}
			ids, err := inbox.PublishMany(ctx, b, q, buf)
			if err != nil {
				return err
			}
			if len(ids) != len(buf) {
				return fmt.Errorf("PublishMany returned %d ids for %d rows", len(ids), len(buf))
			}
		}
		return nil
	})
}

// Bare is the floor of a publish: the same rows written with no library,
// the fastest way the database takes them. On Postgres, COPY (pgx's
// CopyFrom, batch rows a COPY, ids not returned); on MySQL, multi-row
// INSERTs of BareMySQLRows rows, autocommitted, ids not read; on SQLite,
// one transaction of a prepared one-row INSERT a row. db is a pool on url.
func Bare(ctx context.Context, db *sql.DB, url, table string, rows, batch int) (Published, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return Published{}, err
	}
	if d.Kind == dialect.Postgres {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return Published{}, err
		}
		defer conn.Close(ctx)
		return timed(ctx, db, table, rows, func() error {
			buf := make([][]any, 0, batch)
			for done := 0; done < rows; done += batch {
				buf = buf[:0]
				for range min(batch, rows-done) {
					buf = append(buf, []any{PublishPayload})
				}
				if _, err := conn.CopyFrom(ctx, pgx.Identifier(strings.Split(table, ".")), []string{"payload"}, pgx.CopyFromRows(buf)); err != nil {
					return fmt.Errorf("copy: %w", err)
				}
			}
			return nil
		})
	}
	if d.Kind == dialect.MySQL {
		return bareMySQL(ctx, db, d, table, rows)
	}
	return timed(ctx, db, table, rows, func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		st, err := tx.PrepareContext(ctx, "INSERT INTO "+dialect.Quote(table)+" (payload) VALUES (?1)")
		if err != nil {
			return err
		}
		for range rows {
			if _, err := st.ExecContext(ctx, PublishPayload); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
}

// BareMySQLRows is the rows of one bare multi-row INSERT on MySQL.
const BareMySQLRows = 1000

// bareMySQL is Bare on MySQL.
func bareMySQL(ctx context.Context, db *sql.DB, d *dialect.Dialect, table string, rows int) (Published, error) {
	return timed(ctx, db, table, rows, func() error {
		for done := 0; done < rows; done += BareMySQLRows {
			n := min(BareMySQLRows, rows-done)
			args := make([]any, n)
			for i := range args {
				args[i] = PublishPayload
			}
			q := "INSERT INTO " + d.Quote(table) + " (payload) VALUES " + strings.TrimSuffix(strings.Repeat("(?),", n), ",")
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// LoadData writes rows rows into table with LOAD DATA LOCAL INFILE, batch
// rows a statement, each batch streamed from memory through the driver's
// reader handler (ids not read): MySQL's fastest bulk load, the other
// floor of a publish there. The server must allow it (local_infile=ON).
func LoadData(ctx context.Context, db *sql.DB, table string, rows, batch int) (Published, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return Published{}, err
	}
	if d.Kind != dialect.MySQL {
		return Published{}, fmt.Errorf("LOAD DATA: %s is not MySQL", d)
	}
	line := append(slices.Clip(PublishPayload), '\n')
	return timed(ctx, db, table, rows, func() error {
		for done := 0; done < rows; done += batch {
			n := min(batch, rows-done)
			name := fmt.Sprintf("sqlinbox_bench_%d", done)
			mysql.RegisterReaderHandler(name, func() io.Reader { return bytes.NewReader(bytes.Repeat(line, n)) })
			_, err := db.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE "+d.Quote(table)+" (payload)")
			mysql.DeregisterReaderHandler(name)
			if err != nil {
				return fmt.Errorf("load data: %w", err)
			}
		}
		return nil
	})
}
