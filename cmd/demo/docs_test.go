package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// helpFlags returns the flags a command prints with -h ("" is the demo
// without a subcommand).
func helpFlags(t *testing.T, name string) []string {
	t.Helper()
	args := []string{"-h"}
	if name != "" {
		args = []string{name, "-h"}
	}
	var out bytes.Buffer
	err := run(context.Background(), args, stdio{in: strings.NewReader(""), out: &out, err: &out})
	require.True(t, err == nil || errors.Is(err, flag.ErrHelp), "demo %s -h: %v", name, err)
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(out.String(), -1) {
		flags = append(flags, m[1])
	}
	require.NotEmpty(t, flags, "demo %s -h lists no flags:\n%s", name, out.String())
	return flags
}

// documentedFlags parses the Flags section of docs/demo.md: each table
// belongs to the commands its heading names (`demo`, `demo broker`, ...),
// and each row's first column names one or more flags.
func documentedFlags(t *testing.T) map[string][]string {
	t.Helper()
	page, err := os.ReadFile("../../docs/demo.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(page), "\n## Flags\n")
	require.True(t, ok, "docs/demo.md has a Flags section")
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string][]string{}
	var cmds []string
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			cmds = nil
			for _, m := range regexp.MustCompile("`demo( [a-z]+)?`").FindAllStringSubmatch(line, -1) {
				cmds = append(cmds, strings.TrimSpace(m[1]))
			}
			require.NotEmpty(t, cmds, "heading %q names no command", line)
		case strings.HasPrefix(line, "| `--"):
			first := strings.Split(strings.Trim(line, "|"), "|")[0]
			for _, m := range regexp.MustCompile("`--([a-z-]+)").FindAllStringSubmatch(first, -1) {
				for _, c := range cmds {
					out[c] = append(out[c], m[1])
				}
			}
		}
	}
	return out
}

// TestFlagsDocumented holds docs/demo.md's flag tables to the flags each
// command defines, both ways.
func TestFlagsDocumented(t *testing.T) {
	documented := documentedFlags(t)
	names := []string{""}
	for _, c := range commands {
		names = append(names, c.name)
	}
	for _, name := range names {
		require.ElementsMatch(t, helpFlags(t, name), documented[name], "flags of demo %s against docs/demo.md", name)
		delete(documented, name)
	}
	require.Empty(t, documented, "docs/demo.md documents commands demo does not have")
}

// TestEndpointsDocumented holds the table of the instances' own endpoints
// in docs/demo.md to those web.go registers beside the query API, both
// ways.
func TestEndpointsDocumented(t *testing.T) {
	page, err := os.ReadFile("../../docs/demo.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(page), "\n### The instances' HTTP endpoints\n")
	require.True(t, ok, "docs/demo.md lists the instances' endpoints")
	section, _, _ = strings.Cut(section, "\n#")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(GET /\\S*)`").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	src, err := os.ReadFile("web.go")
	require.NoError(t, err)
	var registered []string
	for _, m := range regexp.MustCompile(`mux\.Handle(?:Func)?\("(GET /[^"]*)"`).FindAllStringSubmatch(string(src), -1) {
		// "GET /{$}" is the page at / alone.
		registered = append(registered, strings.TrimSuffix(m[1], "{$}"))
	}
	require.NotEmpty(t, registered)
	require.ElementsMatch(t, registered, documented, "web.go's endpoints against docs/demo.md")
}
