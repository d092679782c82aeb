package topology_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeExampleMatches keeps the README's orders-and-revenue example
// equal to Example_ordersAndRevenue, which go test compiles and runs: the
// README must hold the example's topology code, dedented, and every line
// of its expected output.
func TestReadmeExampleMatches(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
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
	require.Contains(t, string(readme), strings.Join(code, "\n")+"\n```", "README's copy of the example's topology")

	_, output, ok := strings.Cut(body, "// Output:\n")
	require.True(t, ok)
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "// ") {
			break
		}
		require.Contains(t, string(readme), strings.TrimPrefix(line, "// ")+"\n", "README's copy of the expected output")
	}
}
