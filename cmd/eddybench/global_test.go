package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSmokeGlobalRestore runs benchmark (r), which is not in the default
// set, at a tiny size: the App's restoration with its checks and the bare
// badger baseline.
func TestSmokeGlobalRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and Apps")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "r", "--records", "3000"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	require.Contains(t, out.String(), "(r) global-table restore")
}
