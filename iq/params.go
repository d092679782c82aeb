package iq

import (
	"net/url"
	"strconv"
	"time"
)

// params are a query's URL parameters.
type params struct {
	bound        Staleness
	route        bool
	partition    int32
	hasPartition bool
	minPos       int64
	hasMin       bool
	limit        int
	prefer       Preference
	asOf         int64
	hasAsOf      bool
}

// parseAsOf reads an as_of time: RFC 3339, or milliseconds since the
// epoch.
func parseAsOf(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, invalidf("as_of=%q: want an RFC 3339 time or milliseconds since the epoch", s)
	}
	return t.UnixMilli(), nil
}

func parseParams(v url.Values, routeDefault bool, maxLimit int) (params, error) {
	p := params{route: routeDefault, limit: maxLimit}
	var err error
	if p.bound, err = ParseStaleness(v.Get("staleness")); err != nil {
		return p, err
	}
	if s := v.Get("route"); s != "" {
		if p.route, err = strconv.ParseBool(s); err != nil {
			return p, invalidf("route=%q: want true or false", s)
		}
	}
	if s := v.Get("partition"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return p, invalidf("partition=%q: want a non-negative partition number", s)
		}
		p.partition, p.hasPartition = int32(n), true
	}
	if s := v.Get("min_position"); s != "" {
		if p.minPos, err = strconv.ParseInt(s, 10, 64); err != nil || p.minPos < 0 {
			return p, invalidf("min_position=%q: want a changelog offset, 0 or more", s)
		}
		p.hasMin = true
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return p, invalidf("limit=%q: want a positive count", s)
		}
		p.limit = min(n, maxLimit)
	}
	if p.prefer, err = ParsePreference(v.Get("prefer")); err != nil {
		return p, err
	}
	if s := v.Get("as_of"); s != "" {
		if p.asOf, err = parseAsOf(s); err != nil {
			return p, err
		}
		p.hasAsOf = true
	}
	return p, nil
}

func (p params) options() []QueryOption {
	opts := []QueryOption{WithStaleness(p.bound)}
	if p.hasPartition {
		opts = append(opts, WithPartition(p.partition))
	}
	if p.hasMin {
		opts = append(opts, WithMinPosition(p.minPos))
	}
	if p.limit > 0 {
		opts = append(opts, WithLimit(p.limit))
	}
	if p.hasAsOf {
		opts = append(opts, AsOfMillis(p.asOf))
	}
	return opts
}

// forwardQuery is the query of a forwarded request: the same bound,
// minimum position and partition, never routed again.
func (p params) forwardQuery() url.Values {
	v := url.Values{}
	v.Set("staleness", p.bound.String())
	v.Set("route", "false")
	if p.hasMin {
		v.Set("min_position", strconv.FormatInt(p.minPos, 10))
	}
	if p.hasPartition {
		v.Set("partition", strconv.Itoa(int(p.partition)))
	}
	if p.hasAsOf {
		v.Set("as_of", strconv.FormatInt(p.asOf, 10))
	}
	return v
}
