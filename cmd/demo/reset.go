package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/eddystreams/eddy/runtime"
)

const resetSynopsis = "--brokers HOST:PORT[,...] [--app wordcount] [--state-dir DIR] [--to-time TIME] [--dry-run] [--remove-static-members] [--tls-ca F] [--sasl-user U --sasl-password P]"

// runReset is `demo reset`: it resets the word-count application with
// runtime.Reset so that its next start counts the input again.
func runReset(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("reset", resetSynopsis, s)
	brokers := fs.String("brokers", "", "comma-separated `HOST:PORT` list of brokers (required)")
	appID := fs.String("app", "wordcount", "application ID: the consumer group and internal topic prefix")
	stateDir := fs.String("state-dir", "", "`DIR` of an instance's state on this machine, to delete (default: none; state elsewhere is discarded by the instances at their next start)")
	toTime := fs.String("to-time", "", "reset the input to the first record at or after `TIME` (RFC 3339, or Unix milliseconds) instead of to its start")
	dryRun := fs.Bool("dry-run", false, "print what would be done and change nothing")
	removeStatic := fs.Bool("remove-static-members", false, "remove static members (of killed instances, still in the group until their session timeout) before checking that the group is empty")
	var logs logFlags
	logs.add(fs, "warn")
	sec := addSecurityFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsCfg, mech, err := sec.resolve()
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	seeds := splitBrokers(*brokers)
	if len(seeds) == 0 {
		return usageErrorf(fs, "--brokers is required")
	}
	var at time.Time
	if *toTime != "" {
		if at, err = parseResetTime(*toTime); err != nil {
			return usageErrorf(fs, "--to-time: %v", err)
		}
	}
	logger, err := logs.logger(s.err)
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}
	logSettings(logger, fs)
	topo, err := wordCount()
	if err != nil {
		return err
	}
	cfg := runtime.Config{
		ApplicationID: *appID,
		Brokers:       seeds,
		StateDir:      *stateDir,
		TLS:           tlsCfg,
		SASL:          mech,
		Logger:        logger,
	}
	rep, err := runtime.Reset(ctx, topo, cfg, runtime.ResetOptions{
		ToTime:              at,
		DryRun:              *dryRun,
		KeepLocalState:      *stateDir == "",
		RemoveStaticMembers: *removeStatic,
	})
	if err != nil {
		return err
	}
	_, err = rep.WriteTo(s.out)
	return err
}

// parseResetTime reads an RFC 3339 time or Unix milliseconds.
func parseResetTime(v string) (time.Time, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339 (2026-01-02T15:04:05Z) or Unix milliseconds, got %q", v)
	}
	return t, nil
}
