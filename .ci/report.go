//go:build ignore

// report reads `go test -json` on stdin and prints what a CI reader needs:
// each package's result, the whole output of every failed test, the tests
// that skipped for want of a service, and a closing count. It exits 1 when a
// test failed or skipped for want of Postgres, Redis, MariaDB, PgBouncer or
// the failover cluster (one of serviceVars named in its skip message).
//
//	go test -json ./... | go run .ci/report.go
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	outputs := map[string][]string{} // package/test -> output lines
	var failed, skippedForService []string
	passed, skipped := 0, 0
	var pkgLines []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // build errors and the like
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test != "" {
				outputs[key] = append(outputs[key], e.Output)
			} else if strings.HasPrefix(e.Output, "FAIL") || strings.HasPrefix(e.Output, "ok") || strings.Contains(e.Output, "[build failed]") || strings.HasPrefix(e.Output, "panic") {
				pkgLines = append(pkgLines, strings.TrimRight(e.Output, "\n"))
			} else if !strings.HasPrefix(e.Output, "PASS") && !strings.HasPrefix(e.Output, "?") && !strings.HasPrefix(e.Output, "=== ") {
				pkgLines = append(pkgLines, "  "+strings.TrimRight(e.Output, "\n"))
			}
		case "pass":
			if e.Test != "" {
				passed++
				delete(outputs, key)
			}
		case "fail":
			if e.Test != "" {
				failed = append(failed, key)
			}
		case "skip":
			if e.Test != "" {
				skipped++
				text := strings.Join(outputs[key], "")
				if wantsService(text) {
					skippedForService = append(skippedForService, key+": "+strings.TrimSpace(lastLine(text)))
				}
				delete(outputs, key)
			}
		}
	}
	for _, l := range pkgLines {
		fmt.Println(l)
	}
	sort.Strings(failed)
	for _, k := range failed {
		fmt.Printf("\n--- FAIL: %s\n%s", k, strings.Join(outputs[k], ""))
	}
	for _, s := range skippedForService {
		fmt.Println("skipped for want of a service, which CI provides:", s)
	}
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", passed, len(failed), skipped)
	if len(failed) > 0 || len(skippedForService) > 0 {
		os.Exit(1)
	}
}

// serviceVars are the variables that point tests at the services CI runs.
var serviceVars = []string{"POSTGRES_TEST_URL", "REDIS_TEST_URL", "MYSQL_TEST_URL", "PGBOUNCER_TX_TEST_URL", "PGBOUNCER_SESSION_TEST_URL", "FAILOVER_TEST_URL"}

func wantsService(skipOutput string) bool {
	for _, v := range serviceVars {
		if strings.Contains(skipOutput, v) {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
