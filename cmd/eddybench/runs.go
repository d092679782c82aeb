package main

import (
	"fmt"
	"slices"
)

// side is one thing a benchmark measures: Eddy, or the baseline it is
// held to.
type side struct {
	name string
	// run measures once and returns the figure. i is 0 for the warm-up
	// and 1…n for the measured runs, so that each run can give itself a
	// group, topics and a directory of its own.
	run func(i int) (float64, error)
}

// alternate runs every side once as a warm-up whose figure is dropped (a
// cold first run measures the page cache, the heap's growth and the
// broker's first segments as much as the code), then all the sides in
// turn, n times over, so that load from elsewhere on the machine falls on
// every side alike rather than on whichever ran during it. It returns each
// side's n figures, in the order of sides.
func alternate(cfg *config, sides ...side) ([]spread, error) {
	out := make([]spread, len(sides))
	for i := range cfg.runs + 1 {
		for j, s := range sides {
			v, err := s.run(i)
			if err != nil {
				if i == 0 {
					return out, fmt.Errorf("%s, warm-up: %w", s.name, err)
				}
				return out, fmt.Errorf("%s, run %d: %w", s.name, i, err)
			}
			if i == 0 {
				cfg.logf("%s warm-up: %s (dropped)", s.name, fmtNum(v))
				continue
			}
			cfg.logf("%s run %d: %s", s.name, i, fmtNum(v))
			out[j] = append(out[j], v)
		}
	}
	for j, s := range sides {
		fmt.Fprintf(cfg.out, "  %s: median %s, %s\n", s.name, fmtNum(out[j].median()), out[j])
	}
	return out, nil
}

// spread is one side's figures over its measured runs, in run order.
type spread []float64

// median is the middle figure, or the mean of the middle two.
func (s spread) median() float64 {
	if len(s) == 0 {
		return 0
	}
	v := slices.Sorted(slices.Values(s))
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// bounds are the smallest and the largest figure.
func (s spread) bounds() (lo, hi float64) {
	if len(s) == 0 {
		return 0, 0
	}
	return slices.Min(s), slices.Max(s)
}

// String is the range the figures span, as the table prints it.
func (s spread) String() string {
	switch len(s) {
	case 0:
		return "-"
	case 1:
		return "one run"
	}
	lo, hi := s.bounds()
	return fmt.Sprintf("%s–%s (%d runs)", fmtNum(lo), fmtNum(hi), len(s))
}
