package runtime

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Config.Dial makes every connection to the brokers: seeded at an address
// nothing listens on, an instance whose Dial sends every connection to the
// real broker joins its group, and Kill still cuts what Dial returned.
func TestDialMakesEveryConnection(t *testing.T) {
	b, adm := startBroker(t, "in")
	real := b.Addrs()[0]
	const seed = "eddy-seed.invalid:9092"
	var mu sync.Mutex
	asked := map[string]int{}
	var made []net.Conn
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, real)
		mu.Lock()
		defer mu.Unlock()
		asked[address]++
		if err == nil {
			made = append(made, c)
		}
		return c, err
	}
	app, err := New(countTopology(t), Config{ApplicationID: "d", Brokers: []string{seed}, StateDir: t.TempDir(),
		SessionTimeout: 20 * time.Second, Dial: dial})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx), "starting with the seed reachable only through Dial")
	waitFor(t, 15*time.Second, "ready", app.Ready)
	require.Equal(t, DefaultNumStreamThreads, groupMembers(t, adm, "d"))

	mu.Lock()
	require.Positive(t, asked[seed], "the seed was dialed through Dial: %v", asked)
	require.Positive(t, asked[real], "the advertised broker was dialed through Dial: %v", asked)
	conns := append([]net.Conn(nil), made...)
	mu.Unlock()

	app.Kill()
	for _, c := range conns {
		_, err := c.Write([]byte{0})
		require.ErrorIs(t, err, net.ErrClosed, "a connection Dial made is cut by Kill")
	}
}
