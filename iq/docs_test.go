package iq

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// queriesPage returns docs/queries.md.
func queriesPage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/queries.md")
	require.NoError(t, err)
	return string(b)
}

// tableRows returns the cells of the rows of the tables in text, with
// escaped pipes (\|) kept inside their cells.
func tableRows(text string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---") {
			continue
		}
		line = strings.ReplaceAll(line, `\|`, "\x00")
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
		}
		rows = append(rows, cells)
	}
	return rows
}

// section returns the text under a page's "## title" heading.
func section(t *testing.T, page, title string) string {
	t.Helper()
	_, s, ok := strings.Cut(page, "\n## "+title+"\n")
	require.True(t, ok, "docs/queries.md has a section %q", title)
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestHTTPEndpointsDocumented holds the table of docs/queries.md's HTTP API
// section to the patterns the Server registers, both ways. The page writes
// paths with example stores and keys; they are compared as patterns.
func TestHTTPEndpointsDocumented(t *testing.T) {
	store := regexp.MustCompile(`/stores/[^/?]+`)
	key := regexp.MustCompile(`/keys/[^/?]+`)
	var documented []string
	for _, row := range tableRows(section(t, queriesPage(t), "The HTTP API")) {
		for _, m := range codeSpan.FindAllStringSubmatch(row[0], -1) {
			if !strings.HasPrefix(m[1], "GET /") {
				continue
			}
			p, _, _ := strings.Cut(m[1], "?")
			p = store.ReplaceAllString(p, "/stores/{store}")
			p = key.ReplaceAllString(p, "/keys/{key}")
			documented = append(documented, p)
		}
	}
	// The patterns as the source registers them; "/" is the catch-all
	// that refuses everything else.
	var registered []string
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`HandleFunc\("(GET [^"]+)"`).FindAllStringSubmatch(string(src), -1) {
			registered = append(registered, m[1])
		}
	}
	require.NotEmpty(t, registered)
	slices.Sort(documented)
	require.ElementsMatch(t, registered, slices.Compact(documented), "the Server's endpoints against docs/queries.md")
}

// TestErrorReasonsDocumented holds the reasons table of docs/queries.md to
// the Server's error answers: each row's Go error is answered with the
// row's status and reason, and every reason the code has is in the table
// or, for the two that only describe an attempt, in the text below it.
func TestErrorReasonsDocumented(t *testing.T) {
	errs := map[string]error{
		"ErrInvalidQuery":     ErrInvalidQuery,
		"ErrUnknownPartition": ErrUnknownPartition,
		"ErrUnauthorized":     ErrUnauthorized,
		"ErrUnknownStore":     ErrUnknownStore,
		"*BehindError":        &BehindError{},
		"ErrNotHostedHere":    ErrNotHostedHere,
		"ErrOverloaded":       ErrOverloaded,
		"any other":           errors.New("disk on fire"),
		"*StaleError":         &StaleError{},
		"*UnavailableError":   &UnavailableError{},
		"ErrRebalancing":      ErrRebalancing,
		"ErrNotStarted":       ErrNotStarted,
		"ErrShuttingDown":     ErrShuttingDown,
		"ErrNotRunning":       ErrNotRunning,
	}
	errorsSection := section(t, queriesPage(t), "Errors")
	var documented []string
	for _, row := range tableRows(errorsSection) {
		if row[0] == "reason" {
			continue
		}
		require.Len(t, row, 4, "reason row %q", row)
		reason := strings.Trim(row[0], "`")
		status, err := strconv.Atoi(row[1])
		require.NoError(t, err, "row %q", row)
		name := codeSpan.FindStringSubmatch(row[2])
		goErr := row[2]
		if name != nil {
			goErr = name[1]
		}
		e, ok := errs[goErr]
		require.True(t, ok, "row %q: unknown Go error %q", row, goErr)
		gotStatus, gotReason := classify(e)
		require.Equal(t, reason, gotReason, "reason of %s", goErr)
		require.Equal(t, status, gotStatus, "status of %s", goErr)
		require.NotEmpty(t, http.StatusText(status))
		documented = append(documented, reason)
	}
	src, err := os.ReadFile("wire.go")
	require.NoError(t, err)
	var all []string
	for _, m := range regexp.MustCompile(`(?m)^\treason\w+\s+= "(\w+)"`).FindAllStringSubmatch(string(src), -1) {
		all = append(all, m[1])
	}
	require.NotEmpty(t, all)
	for _, r := range all {
		if r == reasonUnreachable || r == reasonSuspect {
			require.Contains(t, errorsSection, "`"+r+"`", "attempt reason %s", r)
			continue
		}
		require.Contains(t, documented, r, "reason %s is not in docs/queries.md's table", r)
	}
	for _, r := range documented {
		require.Contains(t, all, r, "docs/queries.md documents reason %s, which the code does not have", r)
	}
}

// TestHTTPParametersDocumented holds the parameter list of docs/queries.md's
// HTTP API section to the query parameters the Server reads, both ways.
func TestHTTPParametersDocumented(t *testing.T) {
	api := section(t, queriesPage(t), "The HTTP API")
	_, list, ok := strings.Cut(api, "\nParameters: ")
	require.True(t, ok, "the HTTP API section has a Parameters: paragraph")
	list, _, _ = strings.Cut(list, "\n\n")
	// A parameter is a code span outside parentheses, which hold values
	// and explanations.
	var documented []string
	depth := 0
	for i, parts := 0, strings.Split(list, "`"); i < len(parts); i++ {
		if i%2 == 1 && depth == 0 {
			documented = append(documented, parts[i])
		}
		if i%2 == 0 {
			depth += strings.Count(parts[i], "(") - strings.Count(parts[i], ")")
		}
	}
	var read []string
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	param := regexp.MustCompile(`(?:\.Get\(|\.Has\(|parseTimeParam\(v, )"([a-z_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range param.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(read, m[1]) {
				read = append(read, m[1])
			}
		}
	}
	require.NotEmpty(t, read)
	require.ElementsMatch(t, read, documented, "the query parameters the Server reads against docs/queries.md")
}
