// Package story runs the pure cores' interaction tests: stories told as
// text. A story file (testdata/*.txt) holds blocks of one command, a line
// "----", and the answer the core gave, each block ended by a blank line;
// lines starting with # before a command say what the block shows. The
// commands of a file run in order against one interpreter, so each block
// starts from the state the one before it left. With -update the answers
// are rewritten from what the core now does, for a reader to check before
// committing them. It is imported by tests only.
package story

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the story files' answers from the core's behaviour")

// block is one command of a file and its answer.
type block struct {
	comments []string
	cmd      string
	want     []string
	line     int
}

// Run runs every story file of dir (testdata/*.txt) as a subtest named
// after it; start gives each file a fresh interpreter, which answers a
// command with the lines it expects in the file.
func Run(t *testing.T, dir string, start func() func(cmd string) []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no story files in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			blocks := read(t, f)
			interact := start()
			for i := range blocks {
				b := &blocks[i]
				got := interact(b.cmd)
				if *update {
					b.want = got
					continue
				}
				if !slices.Equal(got, b.want) {
					t.Errorf("%s:%d: %s\n got:\n  %s\n want:\n  %s", f, b.line, b.cmd,
						strings.Join(got, "\n  "), strings.Join(b.want, "\n  "))
					return // the blocks after it start from its state
				}
			}
			if *update {
				write(t, f, blocks)
			}
		})
	}
}

func read(t *testing.T, name string) []block {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur block
	var comments []string
	answering := false
	flush := func(n int) {
		if cur.cmd == "" {
			return
		}
		if !answering && !*update {
			t.Fatalf("%s:%d: %q has no answer", name, n, cur.cmd)
		}
		out, cur, answering = append(out, cur), block{}, false
	}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case answering && line == "":
			flush(n)
		case answering:
			cur.want = append(cur.want, line)
		case line == "":
		case strings.HasPrefix(line, "#"):
			comments = append(comments, line)
		case line == "----":
			if cur.cmd == "" {
				t.Fatalf("%s:%d: an answer with no command", name, n)
			}
			answering = true
		default:
			flush(n)
			cur, comments = block{comments: comments, cmd: line, line: n}, nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush(n)
	return out
}

func write(t *testing.T, name string, blocks []block) {
	t.Helper()
	var sb strings.Builder
	for i, b := range blocks {
		if i > 0 {
			sb.WriteString("\n")
		}
		for _, c := range b.comments {
			sb.WriteString(c + "\n")
		}
		sb.WriteString(b.cmd + "\n----\n")
		for _, w := range b.want {
			sb.WriteString(w + "\n")
		}
	}
	if err := os.WriteFile(name, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
