package main

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// encodeURIComponent is JavaScript's: everything but letters, digits and
// -_.!~*'() is percent-encoded as UTF-8.
func encodeURIComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
		}
	}
	return b.String()
}

// TestPageLookupsKeepTheirKey resolves every store lookup the status page
// makes, as a browser resolves a relative URL (dot segments removed), and
// checks that the request still names the word typed: a word such as
// ".." put in the path would reach another endpoint.
func TestPageLookupsKeepTheirKey(t *testing.T) {
	templates := regexp.MustCompile("`(v1/stores/[^`]*)`").FindAllStringSubmatch(string(indexHTML), -1)
	if len(templates) < 2 {
		t.Fatalf("found %d store lookups in the page, want the total's and the minutes'", len(templates))
	}
	base, _ := url.Parse("http://127.0.0.1:8081/?word=x")
	for _, tm := range templates {
		for _, word := range []string{"the", ".", "..", "a/b", "a?b#c", "%2e%2e", "é", "a b+c"} {
			raw := strings.NewReplacer("${encodeURIComponent(word)}", encodeURIComponent(word),
				"${encodeURIComponent(staleness)}", "active").Replace(tm[1])
			if strings.Contains(raw, "${") {
				t.Fatalf("template %q has a substitution this test does not know", tm[1])
			}
			ref, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("page URL %q: %v", raw, err)
			}
			u := base.ResolveReference(ref)
			got, ok := u.Query().Get("key"), u.Query().Has("key")
			if !ok {
				seg := strings.TrimPrefix(u.EscapedPath(), "/v1/stores/counts/keys/")
				got, err = url.PathUnescape(seg)
				ok = seg != u.EscapedPath() && err == nil && !strings.Contains(seg, "/")
			}
			if !ok || got != word {
				t.Errorf("word %q: the page asks %s, which does not look up %q", word, u, word)
			}
		}
	}
}
