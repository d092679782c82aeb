package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The word-count input is generated, like the demo's: a seeded Zipf
// distribution over a fixed vocabulary gives the skew of real text (a few
// hot words, a long tail), which decides how much the record cache can
// collapse and how partitions are loaded. It is a smaller cousin of
// cmd/demo's generator (package main there, so not importable): plain
// ASCII words, occasional capitals and punctuation.

const (
	benchVocabulary = 5000
	benchZipfS      = 1.1
	minWordsPerLine = 5
	maxWordsPerLine = 15
)

// lineGen produces lines of text deterministically from a seed. It is not
// safe for concurrent use.
type lineGen struct {
	vocab []string
	r     *rand.Rand
	zipf  *rand.Zipf
	b     strings.Builder
}

func newLineGen(seed uint64) *lineGen {
	r := rand.New(rand.NewPCG(seed, 0x62656e6368))
	vocab := make([]string, 0, benchVocabulary)
	seen := make(map[string]bool, benchVocabulary)
	const letters = "abcdefghijklmnopqrstuvwxyz"
	const vowels = "aeiou"
	for len(vocab) < benchVocabulary {
		var b strings.Builder
		// Syllables grow with rank only loosely; what matters is that
		// words are distinct and of natural length (2-12 bytes).
		for range 1 + r.IntN(4) {
			b.WriteByte(letters[r.IntN(len(letters))])
			b.WriteByte(vowels[r.IntN(len(vowels))])
			if r.IntN(3) == 0 {
				b.WriteByte(letters[r.IntN(len(letters))])
			}
		}
		if r.IntN(50) == 0 {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		w := b.String()
		if !seen[w] {
			seen[w] = true
			vocab = append(vocab, w)
		}
	}
	return &lineGen{vocab: vocab, r: r, zipf: rand.NewZipf(r, benchZipfS, 1, uint64(len(vocab)-1))}
}

// line returns the next line: a capitalized sentence with commas and a
// closing stop, so that tokenizing does real work.
func (g *lineGen) line() string {
	g.b.Reset()
	n := minWordsPerLine + g.r.IntN(maxWordsPerLine-minWordsPerLine+1)
	for i := range n {
		w := g.vocab[g.zipf.Uint64()]
		if i == 0 {
			g.b.WriteByte(byte(unicode.ToUpper(rune(w[0]))))
			w = w[1:]
		}
		g.b.WriteString(w)
		switch {
		case i == n-1:
			g.b.WriteByte('.')
		case g.r.IntN(12) == 0:
			g.b.WriteString(", ")
		default:
			g.b.WriteByte(' ')
		}
	}
	return g.b.String()
}

// appendWords appends line's words to dst: maximal runs of Unicode letters
// or digits, lowercased, as the demo's word count defines them. Both the
// baseline and the Eddy topology use it, so they do the same tokenizing
// work. Words already in lowercase are substrings of line (no allocation).
func appendWords(dst []string, line string) []string {
	start, lower := -1, true
	flush := func(end int) {
		w := line[start:end]
		if !lower {
			w = strings.ToLower(w)
		}
		dst = append(dst, w)
		start = -1
	}
	for i := 0; i < len(line); {
		r, size := rune(line[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(line[i:])
		}
		if r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			if start < 0 {
				start, lower = i, true
			}
			if lower && unicode.ToLower(r) != r {
				lower = false
			}
		} else if start >= 0 {
			flush(i)
		}
		i += size
	}
	if start >= 0 {
		flush(len(line))
	}
	return dst
}

// maxCorpusLine bounds one input record read from --corpus: well under the
// broker's default message size, so that a stray huge line (a minified
// file, say) fails the run with its line number rather than a produce error.
const maxCorpusLine = 256 << 10

// inputLines returns the word-count input: the non-blank lines of
// cfg.corpus, or cfg.lines generated lines.
func inputLines(cfg *config) ([]string, error) {
	if cfg.corpus == "" {
		gen := newLineGen(cfg.seed)
		lines := make([]string, cfg.lines)
		for i := range lines {
			lines[i] = gen.line()
		}
		return lines, nil
	}
	var lines []string
	err := scanCorpus(cfg.corpus, func(l string) { lines = append(lines, l) })
	return lines, err
}

// countCorpusLines returns how many records --corpus gives, so that the
// run's header and the finish lines know the input size before it is read.
func countCorpusLines(path string) (int, error) {
	n := 0
	err := scanCorpus(path, func(string) { n++ })
	if err == nil && n == 0 {
		err = fmt.Errorf("--corpus %s: no non-blank lines", path)
	}
	return n, err
}

// scanCorpus calls fn with each non-blank line of the file at path.
func scanCorpus(path string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--corpus: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxCorpusLine)
	line := 0
	for sc.Scan() {
		line++
		if l := sc.Text(); strings.TrimSpace(l) != "" {
			fn(l)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--corpus %s: after line %d: %w (lines are limited to %d bytes)", path, line, err, maxCorpusLine)
	}
	return nil
}
