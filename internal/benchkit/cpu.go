package benchkit

import (
	"bufio"
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
