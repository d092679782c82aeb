package instancecore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/eddystreams/eddy/internal/story"
)

// runShutdown carries out every step s asks for, reporting each a success
// (StepTake won unless lost, StepAwaitStart with threads) but those in
// failing, and returns the steps in order.
func runShutdown(t *testing.T, s *Shutdown, threads int, lost bool, failing ...ShutdownStep) []ShutdownStep {
	t.Helper()
	var done []ShutdownStep
	for step := s.Next(); step != StepDone; step = s.Next() {
		if len(done) > 100 {
			t.Fatalf("no end to the shutdown: %v", done)
		}
		done = append(done, step)
		o := ShutdownOutcome{Step: step, Won: !lost, Threads: threads, Failed: slices.Contains(failing, step)}
		if err := s.Report(o); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	return done
}

func TestShutdownOrder(t *testing.T) {
	release := "StopWatcher StopProbe CloseFreshness CloseRegistry CloseAhead StopGlobal ClosePurger CloseRouter CloseAdmin CloseLayout CloseStateDir Stopped"
	for _, tc := range []struct {
		name    string
		kind    ShutdownKind
		static  bool
		threads int
		lost    bool
		failing []ShutdownStep
		want    string
	}{
		{name: "close", kind: ShutdownClose, threads: 2,
			want: "AskClose AwaitStart Take PendingShutdown StopThreads AwaitThreads " + release},
		{name: "close of static members", kind: ShutdownClose, static: true, threads: 2,
			want: "AskClose AwaitStart Take PendingShutdown StopThreads AwaitThreads LeaveGroup " + release},
		{name: "close of static members before any thread ran", kind: ShutdownClose, static: true,
			want: "AskClose AwaitStart Take PendingShutdown StopThreads AwaitThreads " + release},
		{name: "close whose threads miss the deadline", kind: ShutdownClose, static: true, threads: 1,
			failing: []ShutdownStep{StepAwaitThreads, StepLeaveGroup},
			want:    "AskClose AwaitStart Take PendingShutdown StopThreads AwaitThreads LeaveGroup " + release},
		{name: "close while another shutdown runs", kind: ShutdownClose, threads: 2, lost: true,
			want: "AskClose AwaitStart Take AwaitDone"},
		{name: "kill", kind: ShutdownKill, threads: 2,
			want: "Sever AwaitStart KillThreads Take PendingShutdown AwaitExits " + release},
		{name: "kill of static members", kind: ShutdownKill, static: true, threads: 2,
			want: "Sever AwaitStart KillThreads Take PendingShutdown AwaitExits " + release},
		{name: "kill while another shutdown runs", kind: ShutdownKill, threads: 2, lost: true,
			want: "Sever AwaitStart KillThreads Take AwaitDone"},
		{name: "failed start", kind: ShutdownFailedStart, static: true,
			want: "Take PendingError " + release},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewShutdown(tc.kind, tc.static)
			got := runShutdown(t, s, tc.threads, tc.lost, tc.failing...)
			if g := joinSteps(got); g != tc.want {
				t.Errorf("order:\n got  %s\n want %s", g, tc.want)
			}
			if s.Phase() != PhaseDone {
				t.Errorf("phase %s at the end", s.Phase())
			}
			if !slices.Equal(s.Failed(), tc.failing) {
				t.Errorf("failed %v, want %v", s.Failed(), tc.failing)
			}
		})
	}
}

// The order holds what each step's doc says it must come before or after.
func TestShutdownOrderKeepsItsConstraints(t *testing.T) {
	before := [][2]ShutdownStep{
		{StepStopWatcher, StepCloseRegistry},
		{StepCloseFreshness, StepCloseAdmin},
		{StepClosePurger, StepCloseAdmin},
		{StepCloseRouter, StepCloseAdmin},
		{StepCloseRegistry, StepCloseLayout},
		{StepCloseAhead, StepCloseLayout},
		{StepStopGlobal, StepCloseLayout},
		{StepCloseLayout, StepCloseStateDir},
		{StepCloseStateDir, StepStopped},
		{StepAwaitThreads, StepStopWatcher},
		{StepAwaitExits, StepStopWatcher},
		{StepSever, StepKillThreads},
	}
	for kind := range numShutdownKinds {
		order := runShutdown(t, NewShutdown(kind, true), 1, false)
		for _, p := range before {
			i, j := slices.Index(order, p[0]), slices.Index(order, p[1])
			if i >= 0 && j >= 0 && i > j {
				t.Errorf("%s: %s after %s: %v", kind, p[0], p[1], order)
			}
		}
	}
}

// An outcome of a step that is not owed is refused, changing nothing.
func TestShutdownRefusesOutcomesNotOwed(t *testing.T) {
	s := NewShutdown(ShutdownKill, false)
	if err := s.Report(ShutdownOutcome{Step: StepAwaitStart}); !errors.Is(err, ErrRefused) {
		t.Fatalf("AwaitStart while Sever is owed: %v", err)
	}
	if s.Next() != StepSever || s.Phase() != PhasePreparing {
		t.Fatalf("changed by a refused outcome: %s, %s", s.Next(), s.Phase())
	}
	runShutdown(t, s, 0, false)
	if err := s.Report(ShutdownOutcome{Step: StepStopped}); !errors.Is(err, ErrRefused) {
		t.Fatalf("an outcome after the end: %v", err)
	}
}

func joinSteps(steps []ShutdownStep) string {
	s := make([]string, len(steps))
	for i, st := range steps {
		s[i] = st.String()
	}
	return strings.Join(s, " ")
}

// The shutdown's stories (testdata/shutdown/*.txt). Commands: "new" with
// the kind (close, kill, failed-start) and "static" for static members;
// "ok", "fail" or "lost" (StepTake) reporting the owed step, "ok" with
// "threads=N" for StepAwaitStart; "report" with a step's name, to report
// one not owed; "run" carrying every step left out successfully. The
// answer is the steps carried out, then the phase, the step owed and the
// steps that failed.
func TestShutdownStories(t *testing.T) {
	story.Run(t, "testdata/shutdown", func() func(string) []string {
		var s *Shutdown
		return func(cmd string) []string {
			f := strings.Fields(cmd)
			if f[0] == "new" {
				kind := slices.Index(shutdownKindNames[:], f[1])
				if kind < 0 {
					return []string{"error: no kind " + f[1]}
				}
				s = NewShutdown(ShutdownKind(kind), slices.Contains(f[2:], "static"))
				return []string{describeShutdown(s)}
			}
			if s == nil {
				return []string{"error: no shutdown yet: begin with new"}
			}
			answer, err := shutdownCommand(s, f)
			if err != nil {
				answer = append(answer, "error: "+err.Error())
			}
			return append(answer, describeShutdown(s))
		}
	})
}

func shutdownCommand(s *Shutdown, f []string) ([]string, error) {
	o := ShutdownOutcome{Step: s.Next(), Won: true}
	switch f[0] {
	case "run":
		var done []string
		for step := s.Next(); step != StepDone; step = s.Next() {
			done = append(done, step.String())
			if err := s.Report(ShutdownOutcome{Step: step, Won: true}); err != nil {
				return done, err
			}
		}
		return done, nil
	case "ok":
		for _, a := range f[1:] {
			n, ok := strings.CutPrefix(a, "threads=")
			if !ok {
				return nil, fmt.Errorf("unknown argument %q", a)
			}
			var err error
			if o.Threads, err = strconv.Atoi(n); err != nil {
				return nil, err
			}
		}
	case "fail":
		o.Failed = true
	case "lost":
		o.Won = false
	case "report":
		i := slices.Index(shutdownStepNames[:], f[1])
		if i < 0 {
			return nil, fmt.Errorf("no step %s", f[1])
		}
		o.Step = ShutdownStep(i)
	default:
		return nil, fmt.Errorf("unknown command %q", f[0])
	}
	return []string{o.Step.String()}, s.Report(o)
}

// describeShutdown is where s stands on one line.
func describeShutdown(s *Shutdown) string {
	line := fmt.Sprintf("> %s next=%s", s.Phase(), s.Next())
	if len(s.Failed()) > 0 {
		line += fmt.Sprintf(" failed=%v", s.Failed())
	}
	return line
}
