package threadcore

import "testing"

// What each failure of a commit or abort is taken for, under each
// guarantee.
func TestCauseOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        Failure
		alo, eos Cause
	}{
		{"moved on", Failure{MovedOn: true}, CauseRefused, CauseRefused},
		{"moved on and fenced", Failure{MovedOn: true, Fenced: true}, CauseRefused, CauseRefused},
		{"crashed", Failure{Crashed: true, Fenced: true, Transient: true}, CauseFatal, CauseFatal},
		{"fenced", Failure{Fenced: true}, CauseFenced, CauseFenced},
		{"session gone", Failure{SessionGone: true, Transient: true}, CauseRefused, CauseFatal},
		{"session gone, stopping", Failure{SessionGone: true}, CauseFatal, CauseFatal},
		{"cannot begin", Failure{CannotBegin: true, Transient: true, Transactional: true}, CauseFenced, CauseFenced},
		{"cannot begin, stopping", Failure{CannotBegin: true, Transactional: true}, CauseFatal, CauseFatal},
		{"timed out", Failure{TimedOut: true, Transient: true}, CauseRefused, CauseFatal},
		{"timed out in a transaction", Failure{TimedOut: true, Transient: true, Transactional: true}, CauseRefused, CauseFenced},
		{"timed out, stopping", Failure{TimedOut: true, Transactional: true}, CauseFatal, CauseFatal},
		{"broker lost", Failure{LostBroker: true, Transient: true}, CauseRefused, CauseFatal},
		{"broker lost in a transaction", Failure{LostBroker: true, Transient: true, Transactional: true}, CauseRefused, CauseFenced},
		{"broker lost, killed", Failure{LostBroker: true, Transactional: true}, CauseFatal, CauseFatal},
		{"anything else", Failure{Transient: true, Transactional: true}, CauseFatal, CauseFatal},
	} {
		if got := CauseOf(tc.f, AtLeastOnce); got != tc.alo {
			t.Errorf("%s at-least-once: %s, want %s", tc.name, got, tc.alo)
		}
		if got := CauseOf(tc.f, ExactlyOnce); got != tc.eos {
			t.Errorf("%s exactly-once: %s, want %s", tc.name, got, tc.eos)
		}
	}
}
