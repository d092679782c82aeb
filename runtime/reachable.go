package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// IsUnreachable reports whether err says that no broker could be reached at
// all: a connection refused, reset or timed out while dialing, a network or
// host unreachable, a broker name that does not resolve. These are what an
// instance sees when it starts before its brokers (a container started
// first, a broker restarting), and Start waits them out. A TLS or SASL
// failure, a missing ACL or a refused request are not: they are answers
// from a reachable cluster, and retrying would not change them.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, kerr.BrokerNotAvailable)
}

// Start's waits between attempts to reach the cluster grow from
// startRetryFirst to startRetryMax.
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 5 * time.Second
)

// untilReachable runs step, and runs it again after a growing pause for as
// long as it fails because no broker can be reached (IsUnreachable),
// logging each failure: Kafka clients wait for their brokers rather than
// give up at the first refused connection. It stops waiting when ctx ends,
// when Close is called, or when Kill cuts the App off, and then returns
// the last failure. Any other failure it returns at once.
func (a *App) untilReachable(ctx context.Context, step func() error) error {
	wait := startRetryFirst
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || !IsUnreachable(err) {
			return err
		}
		a.log.Warn("no broker reachable; Start retries", "attempt", attempt, "retry_in", wait, "brokers", a.cfg.Brokers, "err", err)
		t := time.NewTimer(wait)
		var stop error
		select {
		case <-t.C:
		case <-ctx.Done():
			stop = ctx.Err()
		case <-a.closeAsked:
			stop = errors.New("closed")
		case <-a.killCtx.Done():
			stop = errors.New("killed")
		}
		t.Stop()
		if stop != nil {
			return fmt.Errorf("runtime: no broker of %v reachable in %d attempts (%w), gave up: %w", a.cfg.Brokers, attempt, stop, err)
		}
		wait = min(2*wait, startRetryMax)
	}
}
