package readme_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every ```go block of README.md is a verbatim excerpt of a _test.go file of
// this repository (of any of its modules), so each sample compiles and runs
// in a test and cannot drift from the code. Lines are compared with their
// indentation, runs of blanks and blank lines ignored (gofmt aligns
// comments by their neighbours). To add a sample to README.md, put it in a
// test or Example that runs it (this package holds most of them) and paste
// it from there.
func TestREADMEGoBlocksAreExcerptsOfTests(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no go blocks: the extraction is broken")
	}
	var tests [][]string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
	for _, b := range blocks {
		found := false
		for _, src := range tests {
			if contains(src, b.lines) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md line %d: this go block is in no _test.go file; put it in a test that runs it (internal/readme holds most) and quote it from there:\n%s", b.line, b.text)
		}
	}
}

type block struct {
	line  int // of the opening fence
	text  string
	lines []string
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md string) []block {
	var out []block
	var cur *block
	var text strings.Builder
	for i, line := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{line: i + 1}
			text.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
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
