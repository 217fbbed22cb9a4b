package readme_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, seen from this package.
var root = filepath.Join("..", "..")

// documents are README.md and every guide in docs/: the pages whose
// samples must compile and run.
func documents(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) == 0 {
		t.Fatal("docs/ holds no guide: the glob is broken")
	}
	return append([]string{filepath.Join(root, "README.md")}, guides...)
}

// Every ```go and ```sql block of README.md and of docs/*.md is a verbatim
// excerpt of a _test.go file of this repository (of any of its modules), so
// each sample compiles and runs in a test and cannot drift from the code: a
// Go block is code of a test or of a function a test calls, a SQL block is
// the text of a statement a test runs. A block that is a fragment (a few
// lines of a function) is quoted from the middle of that function, as it
// reads there; nothing else marks it. Lines are compared with their
// indentation, runs of blanks and blank lines ignored (gofmt aligns
// comments by their neighbours). To add a sample, put it in a test or
// Example that runs it (this package holds most of them) and paste it from
// there. Output and shell sessions go in ``` or ```sh blocks, which are not
// checked.
func TestDocBlocksAreExcerptsOfTests(t *testing.T) {
	tests := testSources(t)
	for _, doc := range documents(t) {
		md, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		blocks := codeBlocks(string(md))
		if name == "README.md" && len(blocks) == 0 {
			t.Fatal("README.md has no go blocks: the extraction is broken")
		}
		for _, b := range blocks {
			found := false
			for _, src := range tests {
				if contains(src, b.lines) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s line %d: this %s block is in no _test.go file; put it in a test that runs it (internal/readme holds most) and quote it from there:\n%s", name, b.line, b.lang, b.text)
			}
		}
	}
}

// The README is what a newcomer reads in ten minutes; the rest is in docs/.
func TestREADMEIsShort(t *testing.T) {
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(md), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, more than 300: move the detail to a guide in docs/", n)
	}
}

var link = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// Every relative link of README.md and docs/*.md names a file that exists,
// so a guide renamed or moved does not leave a dead link behind.
func TestDocLinksResolve(t *testing.T) {
	for _, doc := range documents(t) {
		md, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		for _, m := range link.FindAllStringSubmatch(prose(string(md)), -1) {
			target := m[1]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %q, which does not exist", name, target)
			}
		}
	}
}

var (
	pathSpan = regexp.MustCompile("`((?:[a-z0-9_.-]+/)+[A-Za-z0-9_.-]+\\.(?:go|sql|md|png))`")
	testSpan = regexp.MustCompile("`((?:Test|Example|Fuzz)[A-Za-z0-9_]*)`")
)

// Every file path (`claim/suite_test.go`) and every test (`TestPauseResume`)
// that README.md and docs/*.md name in code spans exists, so a file or test
// renamed does not leave the text naming what is gone.
func TestDocNamesExist(t *testing.T) {
	var all strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			all.Write(src)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := all.String()
	for _, doc := range documents(t) {
		md, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		for _, m := range pathSpan.FindAllStringSubmatch(string(md), -1) {
			_, errRoot := os.Stat(filepath.Join(root, m[1]))
			_, errHere := os.Stat(filepath.Join(filepath.Dir(doc), m[1]))
			if errRoot != nil && errHere != nil {
				t.Errorf("%s names %s, which does not exist", name, m[1])
			}
		}
		for _, m := range testSpan.FindAllStringSubmatch(string(md), -1) {
			if !strings.Contains(tests, "func "+m[1]+"(") {
				t.Errorf("%s names %s, which no _test.go file defines", name, m[1])
			}
		}
	}
}

// prose is a Markdown text without its code: fenced blocks and inline code
// spans, where brackets are Go, not links.
func prose(md string) string {
	var out strings.Builder
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out.WriteString(codeSpan.ReplaceAllString(line, "") + "\n")
		}
	}
	return out.String()
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// testSources reads every _test.go file of the repository, normalized.
func testSources(t *testing.T) [][]string {
	t.Helper()
	var tests [][]string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tests = append(tests, normalize(string(src)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tests
}

type block struct {
	line  int    // of the opening fence
	lang  string // go or sql
	text  string
	lines []string
}

// codeBlocks returns the ```go and ```sql blocks of a Markdown text.
func codeBlocks(md string) []block {
	var out []block
	var cur *block
	var text strings.Builder
	for i, line := range strings.Split(md, "\n") {
		fence := strings.TrimSpace(line)
		switch {
		case cur == nil && (fence == "```go" || fence == "```sql"):
			cur = &block{line: i + 1, lang: strings.TrimPrefix(fence, "```")}
			text.Reset()
		case cur != nil && fence == "```":
			cur.text = text.String()
			cur.lines = normalize(cur.text)
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			text.WriteString(line + "\n")
		}
	}
	return out
}

// normalize drops indentation, runs of blanks and blank lines.
func normalize(src string) []string {
	var out []string
	for _, line := range strings.Split(src, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// contains reports whether want appears in src as consecutive lines.
func contains(src, want []string) bool {
	if len(want) == 0 {
		return true
	}
	for i := 0; i+len(want) <= len(src); i++ {
		if src[i] == want[0] {
			match := true
			for j := range want {
				if src[i+j] != want[j] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}
