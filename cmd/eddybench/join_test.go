package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSmokeJoin runs benchmark (j), which is not in the default set, at a
// tiny size: the table loads, the join runs with every output checked, and
// the counts with theirs.
func TestSmokeJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and Apps")
	}
	defer func(c, o int) { jnCustomerN, jnOrderN = c, o }(jnCustomerN, jnOrderN)
	jnCustomerN, jnOrderN = 2_000, 10_000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"--only", "j", "--runs", "1", "--tasks", "4"}, strings.NewReader(""), &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	require.Contains(t, out.String(), "(j) stream–table join vs key-value count")
}
