package topology_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsExampleMatches keeps the orders-and-revenue example of
// docs/dsl.md equal to Example_ordersAndRevenue, which go test compiles and
// runs: the page must hold the example's topology code, dedented, and
// every line of its expected output.
func TestDocsExampleMatches(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	page, err := os.ReadFile("../docs/dsl.md")
	require.NoError(t, err)

	_, body, ok := strings.Cut(string(src), "func Example_ordersAndRevenue")
	require.True(t, ok, "Example_ordersAndRevenue is in example_test.go")
	start := strings.Index(body, "\tb := topology.NewBuilder()")
	end := strings.Index(body, "\ttopo, err := b.Build()")
	require.True(t, start >= 0 && end > start, "the example builds its topology between NewBuilder and Build")
	var code []string
	for _, line := range strings.Split(strings.TrimRight(body[start:end], "\n"), "\n") {
		code = append(code, strings.TrimPrefix(line, "\t"))
	}
	require.Contains(t, string(page), strings.Join(code, "\n")+"\n```", "docs/dsl.md's copy of the example's topology")

	_, output, ok := strings.Cut(body, "// Output:\n")
	require.True(t, ok)
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "// ") {
			break
		}
		require.Contains(t, string(page), strings.TrimPrefix(line, "// ")+"\n", "docs/dsl.md's copy of the expected output")
	}
}
