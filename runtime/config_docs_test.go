package runtime

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigDocumented holds the table of docs/configuration.md to Config
// both ways: every exported field has a row (a row may name several
// fields), and every field a row names exists.
func TestConfigDocumented(t *testing.T) {
	page, err := os.ReadFile("../docs/configuration.md")
	require.NoError(t, err)
	var documented []string
	for _, line := range strings.Split(string(page), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(strings.Trim(line, "|"), "|")[0]
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	var fields []string
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() {
			fields = append(fields, f.Name)
		}
	}
	require.NotEmpty(t, fields)
	require.ElementsMatch(t, fields, documented, "Config's exported fields against docs/configuration.md's table")
}
