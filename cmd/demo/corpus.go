package main

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The demo's text is generated rather than shipped: a seeded generator gives
// an unbounded, reproducible stream with a realistic word-frequency skew
// (a few very hot keys, a long tail), which is what makes word count an
// interesting load for partitioned state.

const (
	// vocabularySize is the number of distinct generated words.
	vocabularySize = 5000
	// zipfExponent shapes word frequencies: word k (from 0) is drawn with
	// probability proportional to (k+1)^-zipfExponent, so the most common
	// word is about a sixth of all words.
	zipfExponent = 1.1
	// minLineWords and maxLineWords bound the tokens per line, as counted
	// by words.
	minLineWords = 5
	maxLineWords = 15
	// possessive is the token a "'s" suffix adds: the tokenizer splits at
	// the apostrophe, so it is a word of its own, and a frequent one.
	possessive = "s"
)

// Syllable parts. Plain ones dominate; the accented and Greek sets are there
// so that the tokenizer and the lowercasing meet non-ASCII letters. Every
// letter here survives an upper-then-lower round trip (so no final sigma),
// which line relies on when it capitalizes a sentence's first word.
var (
	onsets        = []string{"b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch", "dr", "gl", "kr", "pl", "sh", "st", "th", "tr"}
	vowels        = []string{"a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "io"}
	codas         = []string{"", "", "", "", "n", "r", "s", "l", "m", "k", "nd", "st"}
	accentVowels  = []string{"é", "è", "ö", "ü", "å", "ø", "á", "í"}
	accentOnsets  = []string{"ñ", "ç", "ž", "š"}
	greekOnsets   = []string{"κ", "λ", "μ", "ν", "π", "ρ", "τ", "θ", "δ"}
	greekVowels   = []string{"α", "ε", "ο", "ι", "ω", "η", "ου"}
	sentenceStops = []string{".", ".", ".", "!", "?"}
)

// plainHead is how many of the most frequent words are plain ASCII letters,
// so that the top of the demo's leaderboard reads naturally.
const plainHead = 20

// vocabulary returns size distinct lowercase words, deterministic in seed,
// in rank order. Plain words are ordered shortest first, so that the
// frequent ones are short as in natural language; words with accents,
// Greek letters or digits are scattered among them below the first
// plainHead ranks. Each word is a single token for words.
func vocabulary(seed uint64, size int) []string {
	r := rand.New(rand.NewPCG(seed, 0x766f636162756c61))
	seen := make(map[string]bool, size)
	var plain, exotic []string
	for len(plain)+len(exotic) < size {
		w, isPlain := generateWord(r)
		if seen[w] {
			continue
		}
		seen[w] = true
		if isPlain {
			plain = append(plain, w)
		} else {
			exotic = append(exotic, w)
		}
	}
	// A stable sort keeps generation order within a length, so the result
	// depends only on seed.
	slices.SortStableFunc(plain, func(a, b string) int { return cmp.Compare(len(a), len(b)) })
	out := plain
	for _, w := range exotic {
		at := min(plainHead, len(out))
		at += r.IntN(len(out) - at + 1)
		out = slices.Insert(out, at, w)
	}
	return out
}

func pick(r *rand.Rand, from []string) string { return from[r.IntN(len(from))] }

// generateWord returns a random word and whether it is plain: ASCII
// letters only.
func generateWord(r *rand.Rand) (string, bool) {
	var b strings.Builder
	switch p := r.IntN(1000); {
	case p < 5: // a bare number
		return strconv.Itoa(r.IntN(3000)), false
	case p < 15: // Greek
		for range 2 + r.IntN(2) {
			b.WriteString(pick(r, greekOnsets))
			b.WriteString(pick(r, greekVowels))
		}
		return b.String(), false
	case p < 45: // accented Latin
		syllables := 1 + r.IntN(3)
		accented := r.IntN(syllables)
		for i := range syllables {
			if i == accented && r.IntN(3) == 0 {
				b.WriteString(pick(r, accentOnsets))
			} else {
				b.WriteString(pick(r, onsets))
			}
			if i == accented {
				b.WriteString(pick(r, accentVowels))
			} else {
				b.WriteString(pick(r, vowels))
			}
		}
		b.WriteString(pick(r, codas))
		return b.String(), false
	default:
		// Mostly two or three syllables; one and four are rarer.
		syllables := []int{1, 2, 2, 2, 3, 3, 3, 4}[r.IntN(8)]
		for range syllables {
			b.WriteString(pick(r, onsets))
			b.WriteString(pick(r, vowels))
		}
		b.WriteString(pick(r, codas))
		if p < 60 { // alphanumeric, like a model number
			b.WriteString(strconv.Itoa(r.IntN(100)))
			return b.String(), false
		}
		return b.String(), true
	}
}

// corpus generates lines of demo text. It is not safe for concurrent use.
type corpus struct {
	vocab []string
	r     *rand.Rand
	zipf  *rand.Zipf
	buf   strings.Builder
}

// newCorpus returns a generator of lines whose output depends only on seed.
func newCorpus(seed uint64) *corpus {
	r := rand.New(rand.NewPCG(seed, 0x6c696e6573))
	vocab := vocabulary(seed, vocabularySize)
	return &corpus{
		vocab: vocab,
		r:     r,
		zipf:  rand.NewZipf(r, zipfExponent, 1, uint64(len(vocab)-1)),
	}
}

// line returns the next line: a sentence of minLineWords to maxLineWords
// words with a capitalized first word, occasional commas, hyphens, quotes
// and possessives, and closing punctuation.
func (c *corpus) line() string {
	r := c.r
	b := &c.buf
	b.Reset()
	n := minLineWords + r.IntN(maxLineWords-minLineWords+1)
	for i := 0; i < n; i++ {
		w := c.vocab[c.zipf.Uint64()]
		if i == 0 {
			w = capitalize(w)
		}
		quoted := i > 0 && r.IntN(100) < 2
		if quoted {
			b.WriteByte('"')
		}
		b.WriteString(w)
		if i+1 < n && r.IntN(100) < 4 {
			// A possessive takes the next token's place.
			b.WriteString("'" + possessive)
			i++
		}
		if quoted {
			b.WriteByte('"')
		}
		switch {
		case i+1 == n:
			b.WriteString(pick(r, sentenceStops))
		case r.IntN(100) < 3:
			b.WriteByte('-')
		case r.IntN(100) < 8:
			b.WriteString(", ")
		case r.IntN(100) < 1:
			b.WriteString("  ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// capitalize upper-cases w's first letter when lowercasing it gives the
// letter back, so that words on the line still yields w.
func capitalize(w string) string {
	first, size := utf8.DecodeRuneInString(w)
	up := unicode.ToUpper(first)
	if up == first || unicode.ToLower(up) != first {
		return w
	}
	return string(up) + w[size:]
}

// generateLines returns the first n lines of the corpus for seed.
func generateLines(seed uint64, n int) []string {
	c := newCorpus(seed)
	out := make([]string, n)
	for i := range out {
		out[i] = c.line()
	}
	return out
}

// words splits line into the words that word count counts: maximal runs of
// Unicode letters or digits (unicode.IsLetter or unicode.IsDigit),
// lowercased. Everything else separates words, including apostrophes,
// hyphens, combining marks and digits outside category Nd (such as "²").
// Invalid UTF-8 separates words too.
func words(line string) []string {
	return appendWords(nil, line)
}

// appendWords appends the words of line to dst and returns the extended
// slice. A word that is already lowercase is a substring of line, so a
// caller that reuses dst tokenizes lowercase text without allocating.
func appendWords(dst []string, line string) []string {
	start := -1   // byte offset of the current word, or -1 between words
	lower := true // whether the current word is already lowercase
	for i := 0; i < len(line); {
		c := line[i]
		if c < utf8.RuneSelf {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
				if start < 0 {
					start, lower = i, true
				}
			case 'A' <= c && c <= 'Z':
				if start < 0 {
					start = i
				}
				lower = false
			default:
				if start >= 0 {
					dst = append(dst, lowered(line[start:i], lower))
					start = -1
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(line[i:])
		if r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			if start < 0 {
				start, lower = i, true
			}
			if lower && unicode.ToLower(r) != r {
				lower = false
			}
		} else if start >= 0 {
			dst = append(dst, lowered(line[start:i], lower))
			start = -1
		}
		i += size
	}
	if start >= 0 {
		dst = append(dst, lowered(line[start:], lower))
	}
	return dst
}

func lowered(w string, isLower bool) string {
	if isLower {
		return w
	}
	return strings.Map(unicode.ToLower, w)
}

// countWords tokenizes lines and counts each word: the reference a run's
// final counts are checked against.
func countWords(lines []string) map[string]int64 {
	counts := make(map[string]int64)
	var buf []string
	for _, l := range lines {
		buf = appendWords(buf[:0], l)
		for _, w := range buf {
			counts[w]++
		}
	}
	return counts
}
