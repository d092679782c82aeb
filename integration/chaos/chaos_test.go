package chaos

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// shortKinds are the faults of the short schedule CI runs.
var shortKinds = []Kind{Kill9, Term, Pause, Cut, Reset, Delay, BrokerKill, Corrupt, DiskFull}

// TestShortSchedule runs one short random schedule (EDDY_CHAOS_SEED
// replays one) under exactly-once and checks everything Result lists; a
// failure prints the seed and the schedule.
func TestShortSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault schedule: skipped with -short")
	}
	seed := rand.Uint64() >> 1
	if s := os.Getenv("EDDY_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("EDDY_CHAOS_SEED: %v", err)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("EDDY_DEMO_BIN")
	if bin == "" {
		if bin, err = BuildDemo(root, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Seed: seed, Duration: 30 * time.Second, Guarantee: "exactly-once",
		Kinds: shortKinds, Bin: bin, Dir: t.TempDir(), Log: testLog{t}, SettleTimeout: 90 * time.Second})
	if res != nil {
		t.Log("\n" + res.Summary())
	}
	if err != nil {
		t.Fatalf("seed %d (EDDY_CHAOS_SEED=%d replays it): harness: %v", seed, seed, err)
	}
	if res.Failed() {
		t.Fatalf("seed %d failed (EDDY_CHAOS_SEED=%d replays it); schedule:\n%s", seed, seed, res.Schedule)
	}
}

// testLog writes the run's progress to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}
