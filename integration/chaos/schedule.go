package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults a schedule is made of.
const (
	// Kill9 kills an instance with SIGKILL and restarts it after Hold.
	Kill9 Kind = "kill-9"
	// Term stops an instance with SIGTERM (a clean shutdown) and
	// restarts it after Hold.
	Term Kind = "sigterm"
	// Pause freezes an instance with SIGSTOP for Hold, then SIGCONT.
	Pause Kind = "pause"
	// Cut blackholes an instance's broker connections for Hold.
	Cut Kind = "net-cut"
	// Reset closes every broker connection of an instance at once.
	Reset Kind = "net-reset"
	// Delay delays an instance's broker traffic by Delay for Hold.
	Delay Kind = "net-delay"
	// BrokerKill kills the broker with SIGKILL and restarts it on the
	// same port and data directory after Hold.
	BrokerKill Kind = "broker-kill"
	// Corrupt kills an instance, damages one of its stores (Damage) and
	// restarts it after Hold.
	Corrupt Kind = "corrupt"
	// DiskFull fills the instance's state directory, a small tmpfs, for
	// Hold. Only the instance whose state is on the tmpfs is a target.
	DiskFull Kind = "disk-full"
)

// AllKinds are every kind of fault, in the order summaries list them.
var AllKinds = []Kind{Kill9, Term, Pause, Cut, Reset, Delay, BrokerKill, Corrupt, DiskFull}

// Damage is what Corrupt does to a store.
type Damage string

// Store damages.
const (
	TruncateTable Damage = "truncate-sst"
	FlipTable     Damage = "flip-sst"
	TruncateLog   Damage = "truncate-vlog"
	DropManifest  Damage = "delete-manifest"
	DropStore     Damage = "delete-store"
)

var damages = []Damage{TruncateTable, FlipTable, TruncateLog, DropManifest, DropStore}

// Fault is one fault of a schedule.
type Fault struct {
	At     time.Duration // from the start of the schedule
	Kind   Kind
	Target int           // instance index; -1 for the broker
	Hold   time.Duration // how long the fault lasts (down time, pause, cut)
	Delay  time.Duration // Delay's added latency
	Damage Damage        // Corrupt's damage
	// Pick chooses which store Corrupt damages, among those on disk
	// then, sorted by path: the same seed damages the same store as
	// far as the same stores exist.
	Pick uint32
}

func (f Fault) String() string {
	target := "broker"
	if f.Target >= 0 {
		target = fmt.Sprintf("i%d", f.Target+1)
	}
	s := fmt.Sprintf("%7.2fs %-11s %-6s hold %s", f.At.Seconds(), f.Kind, target, f.Hold.Round(10*time.Millisecond))
	switch f.Kind {
	case Delay:
		s += fmt.Sprintf(" delay %s", f.Delay)
	case Corrupt:
		s += fmt.Sprintf(" %s pick %d", f.Damage, f.Pick)
	}
	return s
}

// Schedule is the faults of one run, in order of At.
type Schedule []Fault

func (s Schedule) String() string {
	var b strings.Builder
	for _, f := range s {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Generate returns the schedule of seed: faults of the given kinds on
// instances 0..instances-1 (and the broker), starting after warmup and
// ending quiet before the end of duration. Faults on one target never
// overlap; faults on different targets may. diskFullTarget is the
// instance whose state is on a tmpfs, or -1.
func Generate(seed uint64, duration time.Duration, instances int, kinds []Kind, diskFullTarget int) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	const warmup = 5 * time.Second
	// The last quiet stretch lets the final fault's restart finish
	// inside the schedule.
	end := duration - 5*time.Second
	busy := make(map[int]time.Duration) // target → busy until
	var s Schedule
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	for at := warmup + between(0, 2*time.Second); at < end; at += between(1500*time.Millisecond, 5*time.Second) {
		k := kinds[rng.IntN(len(kinds))]
		f := Fault{At: at, Kind: k, Target: rng.IntN(instances)}
		switch k {
		case Kill9, Term:
			f.Hold = between(200*time.Millisecond, 3*time.Second)
		case Pause:
			// Up to past the session timeout: a paused member comes back
			// as a zombie.
			f.Hold = between(500*time.Millisecond, 8*time.Second)
		case Cut:
			f.Hold = between(time.Second, 12*time.Second)
		case Reset:
		case Delay:
			f.Hold = between(2*time.Second, 10*time.Second)
			f.Delay = between(20*time.Millisecond, 400*time.Millisecond).Round(time.Millisecond)
		case BrokerKill:
			f.Target = -1
			f.Hold = between(300*time.Millisecond, 3*time.Second)
		case Corrupt:
			f.Hold = between(200*time.Millisecond, 2*time.Second)
			f.Damage = damages[rng.IntN(len(damages))]
			f.Pick = rng.Uint32()
		case DiskFull:
			if diskFullTarget < 0 {
				continue
			}
			f.Target = diskFullTarget
			f.Hold = between(time.Second, 8*time.Second)
		}
		// A busy target puts this fault off to when it is free, if that
		// is still within the schedule.
		f.At = max(f.At, busy[f.Target])
		if f.At+f.Hold >= end {
			continue
		}
		// A restarted process needs a moment before the next fault on
		// it counts as a new one.
		busy[f.Target] = f.At + f.Hold + 2*time.Second
		s = append(s, f)
	}
	slices.SortStableFunc(s, func(a, b Fault) int { return int(a.At - b.At) })
	return s
}

// ParseKinds parses a comma-separated list of fault kinds; "all" is every
// kind.
func ParseKinds(list string) ([]Kind, error) {
	if list == "all" {
		return slices.Clone(AllKinds), nil
	}
	var out []Kind
	for _, name := range strings.Split(list, ",") {
		k := Kind(strings.TrimSpace(name))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("unknown fault kind %q (want some of %v, or all)", name, AllKinds)
		}
		out = append(out, k)
	}
	return out, nil
}
