package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a buffer a command writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// `demo watch WORD` prints the word's current count, then every new one,
// naming the replica that served it, and keeps going when the instance
// serving it is killed.
func TestWatchCommand(t *testing.T) {
	c := startTestCluster(t)
	word := "watchword"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "--http", c.ins[0].addr, word}, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
	}()
	produce := func(n int) {
		t.Helper()
		_, stderr, err := runCmd(ctx, strings.Repeat(word+"\n", n), "produce", "--brokers", strings.Join(c.brokers, ","))
		require.NoError(t, err, stderr)
	}
	shows := func(count int) {
		t.Helper()
		waitUntil(t, 60*time.Second, fmt.Sprintf("the watch showing count %d", count), func() (bool, string) {
			return strings.Contains(out.String(), fmt.Sprintf("%s count %d ", word, count)), out.String() + errOut.String()
		})
	}
	waitUntil(t, 20*time.Second, "the watch starting", func() (bool, string) {
		return strings.Contains(out.String(), "watching"), errOut.String()
	})
	produce(3)
	shows(3)
	require.Contains(t, out.String(), "served by ")
	require.Contains(t, out.String(), ": active replica")

	active := c.activeOf(t, word)
	c.ins[active].kill()
	produce(2)
	shows(5)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, word+" count 5 ") {
			require.NotContains(t, line, "served by "+c.ins[active].addr+":", "served after the kill by the instance that was killed")
		}
	}
	cancel()
	require.NoError(t, <-done)
}
