package main

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestWords(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []string
	}{
		{"empty", "", nil},
		{"only separators", " \t,.;-—  \n", nil},
		{"simple", "the quick fox", []string{"the", "quick", "fox"}},
		{"case and punctuation", "Hello, World! HELLO?", []string{"hello", "world", "hello"}},
		{"apostrophes split", "don't stop; it's Tom's", []string{"don", "t", "stop", "it", "s", "tom", "s"}},
		{"curly apostrophe splits", "can’t", []string{"can", "t"}},
		{"hyphens and underscores split", "well-known snake_case", []string{"well", "known", "snake", "case"}},
		{"digits are word characters", "R2-D2 has 3 legs and 1,000 eyes", []string{"r2", "d2", "has", "3", "legs", "and", "1", "000", "eyes"}},
		{"decimal point splits", "pi=3.14", []string{"pi", "3", "14"}},
		{"accented letters", "Café MÜNCHEN straße Ångström", []string{"café", "münchen", "straße", "ångström"}},
		{"greek", "ΚΑΛΗΜΕΡΑ κόσμε", []string{"καλημερα", "κόσμε"}},
		{"cyrillic", "Привет, мир", []string{"привет", "мир"}},
		{"cjk run is one word", "日本語のテキスト。次", []string{"日本語のテキスト", "次"}},
		{"non-latin digits", "٣٤ and ४२", []string{"٣٤", "and", "४२"}},
		{"superscript is not a digit", "x² y", []string{"x", "y"}},
		{"combining mark splits", "cafe\u0301", []string{"cafe"}},
		{"kelvin sign lowercases to ascii", "\u212Aelvin", []string{"kelvin"}},
		{"emoji separates", "good🙂morning", []string{"good", "morning"}},
		{"invalid utf-8 separates", "ab\xffcd", []string{"ab", "cd"}},
		{"leading and trailing", "  «quoted»  ", []string{"quoted"}},
		{"mixed case inside word", "iPhone eBay", []string{"iphone", "ebay"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, words(tt.line))
		})
	}
}

// TestWordsMatchesDefinition checks the fast tokenizer against a direct
// transcription of the definition, over the generated corpus and over
// strings built from awkward runes.
func TestWordsMatchesDefinition(t *testing.T) {
	reference := func(line string) []string {
		var out []string
		for _, f := range strings.FieldsFunc(line, func(r rune) bool {
			return !(unicode.IsLetter(r) || unicode.IsDigit(r)) || r == utf8.RuneError
		}) {
			out = append(out, strings.ToLower(f))
		}
		return out
	}
	lines := generateLines(7, 2000)
	awkward := []string{"A", "z", "É", "ß", "İ", "Σ", "ς", "\u212A", "1", "²", "٣", "'", "-", " ", "\xff", "\u0301", "ǅ", "日"}
	for i := range 2000 {
		var b strings.Builder
		for j := range 12 {
			b.WriteString(awkward[(i*7+j*j+i/13)%len(awkward)])
		}
		lines = append(lines, b.String())
	}
	for _, l := range lines {
		require.Equal(t, reference(l), words(l), "line %q", l)
	}
}

func TestAppendWordsLowercaseDoesNotAllocate(t *testing.T) {
	line := "lowercase words with digits 42 and ümlauts, already folded"
	buf := make([]string, 0, 16)
	allocs := testing.AllocsPerRun(100, func() {
		buf = appendWords(buf[:0], line)
	})
	require.Zero(t, allocs)
	require.Len(t, buf, 9)
}

func TestVocabulary(t *testing.T) {
	v := vocabulary(1, vocabularySize)
	require.Len(t, v, vocabularySize)
	require.Equal(t, v, vocabulary(1, vocabularySize), "deterministic")
	require.NotEqual(t, v, vocabulary(2, vocabularySize), "seed matters")

	seen := map[string]bool{}
	var nonASCII, withDigit int
	prevLen := 0
	for i, w := range v {
		require.False(t, seen[w], "duplicate %q", w)
		seen[w] = true
		require.Equal(t, []string{w}, words(w), "a vocabulary word is one lowercase token")
		plain := strings.IndexFunc(w, func(r rune) bool { return r < 'a' || r > 'z' }) < 0
		if i < plainHead {
			require.True(t, plain, "the head is plain: %q", w)
		}
		if plain {
			require.GreaterOrEqual(t, len(w), prevLen, "plain words shortest first")
			prevLen = len(w)
		}
		if strings.IndexFunc(w, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 {
			nonASCII++
		}
		if strings.IndexFunc(w, unicode.IsDigit) >= 0 {
			withDigit++
		}
	}
	require.Greater(t, nonASCII, 50, "some words exercise non-ASCII letters")
	require.Greater(t, withDigit, 30, "some words exercise digits")
}

func TestGenerateLines(t *testing.T) {
	const n = 20000
	lines := generateLines(42, n)
	require.Len(t, lines, n)
	require.Equal(t, lines, generateLines(42, n), "deterministic")
	require.Equal(t, lines[:100], generateLines(42, 100), "a shorter run is a prefix")
	require.NotEqual(t, lines[:100], generateLines(43, 100))

	vocab := vocabulary(42, vocabularySize)
	inVocab := make(map[string]bool, len(vocab))
	for _, w := range vocab {
		inVocab[w] = true
	}
	var punctuated, capitalized int
	for _, l := range lines {
		ws := words(l)
		require.GreaterOrEqual(t, len(ws), minLineWords, "line %q", l)
		require.LessOrEqual(t, len(ws), maxLineWords, "line %q", l)
		for _, w := range ws {
			require.True(t, inVocab[w] || w == possessive, "word %q of line %q", w, l)
		}
		if strings.ContainsAny(l, ",'\"-") {
			punctuated++
		}
		if r, _ := utf8.DecodeRuneInString(l); unicode.IsUpper(r) {
			capitalized++
		}
	}
	require.Greater(t, punctuated, n/10, "lines exercise the tokenizer's separators")
	require.Greater(t, capitalized, n/2, "lines exercise lowercasing")

	// The frequencies follow the Zipf ranks: vocabulary order is rank
	// order, the head is heavy and the tail is still reached.
	counts := countWords(lines)
	total := int64(0)
	for _, c := range counts {
		total += c
	}
	require.Greater(t, total, int64(150000))
	require.Greater(t, counts[vocab[0]], counts[vocab[9]])
	require.Greater(t, counts[vocab[9]], counts[vocab[99]])
	require.Greater(t, counts[vocab[99]], counts[vocab[999]])
	share := float64(counts[vocab[0]]) / float64(total)
	require.InDelta(t, 0.15, share, 0.05, "top word's share of all words")
	require.Greater(t, len(counts), 3000, "the long tail is sampled")
}

func TestCountWords(t *testing.T) {
	got := countWords([]string{"A a, b", "", "B's c"})
	require.Equal(t, map[string]int64{"a": 2, "b": 2, "s": 1, "c": 1}, got)
}

func TestCapitalize(t *testing.T) {
	for _, w := range []string{"tora", "élan", "κα", "123", "ñu"} {
		c := capitalize(w)
		require.Equal(t, []string{w}, words(c))
	}
	require.Equal(t, "Élan", capitalize("élan"))
	require.True(t, slices.Contains([]string{"Tora"}, capitalize("tora")))
}

func BenchmarkAppendWords(b *testing.B) {
	lines := generateLines(1, 1000)
	var bytes int64
	for _, l := range lines {
		bytes += int64(len(l))
	}
	b.SetBytes(bytes)
	buf := make([]string, 0, 32)
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range lines {
			buf = appendWords(buf[:0], l)
		}
	}
}

func BenchmarkCorpusLine(b *testing.B) {
	c := newCorpus(1)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.line()
	}
}
