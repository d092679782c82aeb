package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// alternate runs every side's warm-up first, then the sides in turn, and
// the warm-up's figure is in no summary.
func TestAlternate(t *testing.T) {
	var calls []string
	figures := map[string][]float64{
		// The warm-ups (index 0) are far off, as a cold run is: were they
		// kept, every median and range below would differ.
		"base": {1000, 10, 30, 20},
		"eddy": {1, 12, 11, 40},
	}
	mk := func(name string) side {
		return side{name, func(i int) (float64, error) {
			calls = append(calls, fmt.Sprintf("%s%d", name, i))
			return figures[name][i], nil
		}}
	}
	var out strings.Builder
	cfg := &config{out: &out, runs: 3}
	got, err := alternate(cfg, mk("base"), mk("eddy"))
	require.NoError(t, err)
	require.Equal(t, []string{"base0", "eddy0", "base1", "eddy1", "base2", "eddy2", "base3", "eddy3"}, calls)
	require.Equal(t, []spread{{10, 30, 20}, {12, 11, 40}}, got)
	require.Equal(t, 20.0, got[0].median())
	require.Equal(t, 12.0, got[1].median())
	require.Equal(t, "10.0–30.0 (3 runs)", got[0].String())
	require.Contains(t, out.String(), "base warm-up: 1,000 (dropped)")
	require.Contains(t, out.String(), "eddy: median 12.0, 11.0–40.0 (3 runs)")

	r := ratioRow("x", "records/s", got[1], got[0], 0.5)
	require.Equal(t, "0.600×", r.ratio(), "median over median")
	require.True(t, r.pass)
	es, bs := r.spreads()
	require.Equal(t, "11.0–40.0 (3 runs)", es)
	require.Equal(t, "10.0–30.0 (3 runs)", bs)
}

func TestAlternateError(t *testing.T) {
	boom := errors.New("boom")
	cfg := &config{out: io.Discard, runs: 3}
	_, err := alternate(cfg, side{"eddy", func(i int) (float64, error) {
		if i == 2 {
			return 0, boom
		}
		return 1, nil
	}})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "eddy, run 2")
}

func TestSpread(t *testing.T) {
	require.Equal(t, 2.5, spread{4, 1, 3, 2}.median())
	require.Equal(t, 0.0, spread{}.median())
	require.Equal(t, "one run", spread{7}.String())
	lo, hi := spread{4, 1, 3, 2}.bounds()
	require.Equal(t, [2]float64{1, 4}, [2]float64{lo, hi})
}

func TestTargetRatioKeepsItsDecimals(t *testing.T) {
	for v, want := range map[float64]string{0.35: "≥ 0.35×", 1: "≥ 1.0×", 0.7: "≥ 0.7×"} {
		if got := ratioRow("x", "u", spread{1}, spread{1}, v).target; got != want {
			t.Errorf("target %v printed %q, want %q", v, got, want)
		}
	}
}
