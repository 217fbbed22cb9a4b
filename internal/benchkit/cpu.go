package benchkit

import (
	"bufio"
	"context"
	"database/sql"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// MachineCPU is the CPU time, in seconds, every core of the machine has been
// busy since boot (user, nice, system, irq, softirq and steal in the first
// line of /proc/stat), or -1 where there is no /proc/stat. Its difference
// over a drain is the CPU the drain cost all together: this process, the
// database server, and anything else running then, so it is read on a
// quiet machine.
func MachineCPU() float64 {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return -1
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return -1
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		n, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return -1
		}
		busy += n
	}
	return busy / clockTicks
}

// cpuSince returns the machine CPU used since start (a MachineCPU reading),
// or -1 when either reading failed.
func cpuSince(start float64) float64 {
	now := MachineCPU()
	if start < 0 || now < 0 {
		return -1
	}
	return now - start
}

// BackendCPU reads the CPU time, in seconds, of each Postgres server process
// serving a connection to db's current database (pg_stat_activity), from
// /proc: the database's own share of a drain, where MachineCPU counts every
// process. Nil where it cannot be read (not Postgres, or a server on
// another host). Every client of the database is counted: a bench runs in
// a database of its own.
func BackendCPU(ctx context.Context, db *sql.DB) map[int]float64 {
	rows, err := db.QueryContext(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		return nil
	}
	defer rows.Close()
	cpu := map[int]float64{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return nil
		}
		if s, ok := procCPU(pid); ok {
			cpu[pid] = s
		}
	}
	if rows.Err() != nil || len(cpu) == 0 {
		return nil
	}
	return cpu
}

// BackendCPUSince is the CPU seconds the backends of now spent since start
// (BackendCPU readings; a backend not in start counts from its birth), or
// -1 when either is nil. A backend that ended between the two is missed:
// the pools of a drain keep theirs.
func BackendCPUSince(start, now map[int]float64) float64 {
	if start == nil || now == nil {
		return -1
	}
	var s float64
	for pid, c := range now {
		s += c - start[pid]
	}
	return s
}

// procCPU is the user and system CPU seconds of process pid.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseFloat(f[11], 64) // utime, field 14
	s, err2 := strconv.ParseFloat(f[12], 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (u + s) / clockTicks, true
}
