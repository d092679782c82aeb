package runtime

// Checking a Config: every problem is reported at once, grouped by what
// the settings are about.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Validate reports every problem with the configuration, after defaults are
// applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	errs = append(errs, c.validateConnection()...)
	errs = append(errs, c.validateProcessing()...)
	errs = append(errs, c.validateHandlers()...)
	errs = append(errs, c.validateTopics()...)
	errs = append(errs, c.validateState()...)
	if err := c.validateClientOptions(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("runtime: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// validateConnection checks who the instance is and where it connects:
// the application ID, the brokers and the endpoint.
func (c Config) validateConnection() []error {
	var errs []error
	if c.ApplicationID == "" {
		errs = append(errs, errors.New("ApplicationID is required"))
	} else if !appIDPattern.MatchString(c.ApplicationID) {
		errs = append(errs, fmt.Errorf("ApplicationID %q may hold only letters, digits, '.', '_' and '-'", c.ApplicationID))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("Brokers is required (host:port of at least one broker)"))
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("broker %q is not host:port", b))
		}
	}
	if c.Endpoint != "" {
		if _, _, err := net.SplitHostPort(c.Endpoint); err != nil {
			errs = append(errs, fmt.Errorf("Endpoint %q is not host:port", c.Endpoint))
		}
	}
	return errs
}

// validateProcessing checks the threads, commits, caches, polls, idling
// and the group's timeouts.
func (c Config) validateProcessing() []error {
	var errs []error
	if c.NumStreamThreads < 1 {
		errs = append(errs, fmt.Errorf("NumStreamThreads must be at least 1, got %d", c.NumStreamThreads))
	}
	if c.CommitInterval < 0 {
		errs = append(errs, fmt.Errorf("CommitInterval must be positive, got %s", c.CommitInterval))
	}
	if c.DrainedCommitDelay < 0 {
		errs = append(errs, fmt.Errorf("DrainedCommitDelay must be positive, got %s", c.DrainedCommitDelay))
	}
	if c.CacheMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("CacheMaxBytes must not be negative, got %d", c.CacheMaxBytes))
	}
	if c.MaxPollRecords < 0 {
		errs = append(errs, fmt.Errorf("MaxPollRecords must not be negative, got %d", c.MaxPollRecords))
	}
	if c.TaskIdleTime < 0 && c.TaskIdleTime != NeverWaitForInput {
		errs = append(errs, fmt.Errorf("TaskIdleTime must not be negative other than NeverWaitForInput, got %s", c.TaskIdleTime))
	}
	if c.BufferedRecordsPerPartition < 0 {
		errs = append(errs, fmt.Errorf("BufferedRecordsPerPartition must not be negative, got %d", c.BufferedRecordsPerPartition))
	}
	if c.SessionTimeout < 0 || c.RebalanceTimeout < 0 || c.HeartbeatInterval < 0 {
		errs = append(errs, errors.New("SessionTimeout, HeartbeatInterval and RebalanceTimeout must be positive"))
	} else if c.HeartbeatInterval >= c.SessionTimeout {
		errs = append(errs, fmt.Errorf("HeartbeatInterval (%s) must be below SessionTimeout (%s)", c.HeartbeatInterval, c.SessionTimeout))
	}
	switch c.ProcessingGuarantee {
	case AtLeastOnce, ExactlyOnce:
	default:
		errs = append(errs, fmt.Errorf("unknown ProcessingGuarantee %d", int(c.ProcessingGuarantee)))
	}
	if c.TransactionTimeout < 0 {
		errs = append(errs, fmt.Errorf("TransactionTimeout must be positive, got %s", c.TransactionTimeout))
	}
	return errs
}

// validateHandlers checks the error handlers and the dead-letter topic
// they write to.
func (c Config) validateHandlers() []error {
	var errs []error
	switch c.DeserializationErrors {
	case DeserializationFail, DeserializationLogAndSkip:
	default:
		errs = append(errs, fmt.Errorf("unknown DeserializationErrors %d", int(c.DeserializationErrors)))
	}
	switch c.ProcessingErrors {
	case ProcessingFail, ProcessingLogAndContinue:
	default:
		errs = append(errs, fmt.Errorf("unknown ProcessingErrors %d", int(c.ProcessingErrors)))
	}
	switch c.OnStreamThreadError {
	case ShutdownInstance, ReplaceThread, ShutdownApplication:
	default:
		errs = append(errs, fmt.Errorf("unknown OnStreamThreadError %d", int(c.OnStreamThreadError)))
	}
	if c.DeadLetterTopic != "" && c.ProcessingErrors == ProcessingFail && c.DeserializationErrors == DeserializationFail {
		errs = append(errs, fmt.Errorf("DeadLetterTopic %q is set but no handler skips records (set ProcessingErrors to ProcessingLogAndContinue or DeserializationErrors to DeserializationLogAndSkip)", c.DeadLetterTopic))
	}
	return errs
}

// validateTopics checks how internal topics are created, purged and
// written.
func (c Config) validateTopics() []error {
	var errs []error
	if c.ReplicationFactor < -1 || c.ReplicationFactor == 0 {
		errs = append(errs, fmt.Errorf("ReplicationFactor must be -1 or positive, got %d", c.ReplicationFactor))
	}
	if c.DefaultPartitions < -1 || c.DefaultPartitions == 0 {
		errs = append(errs, fmt.Errorf("DefaultPartitions must be -1 or positive, got %d", c.DefaultPartitions))
	}
	if c.RepartitionPurgeInterval < 0 && c.RepartitionPurgeInterval != NoRepartitionPurge {
		errs = append(errs, fmt.Errorf("RepartitionPurgeInterval must be positive, or NoRepartitionPurge to turn purging off, got %s", c.RepartitionPurgeInterval))
	}
	if c.Compression < CompressionNone || c.Compression > CompressionZstd {
		errs = append(errs, fmt.Errorf("unknown Compression %d", int(c.Compression)))
	}
	return errs
}

// validateState checks the settings of standbys, the store layout and
// the assignor.
func (c Config) validateState() []error {
	var errs []error
	if c.NumStandbys < 0 {
		errs = append(errs, fmt.Errorf("NumStandbys must not be negative, got %d", c.NumStandbys))
	}
	if c.MaxGroupMetadataBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxGroupMetadataBytes must not be negative, got %d", c.MaxGroupMetadataBytes))
	}
	if c.StoreLayout != StoreLayoutShared && c.StoreLayout != StoreLayoutPerStore {
		errs = append(errs, fmt.Errorf("StoreLayout %d is neither StoreLayoutShared nor StoreLayoutPerStore", int(c.StoreLayout)))
	}
	if c.AcceptableRecoveryLag < 0 || c.MaxWarmups < 0 || c.ProbingRebalanceInterval < 0 || c.StateCleanupDelay < 0 {
		errs = append(errs, errors.New("AcceptableRecoveryLag, MaxWarmups, ProbingRebalanceInterval and StateCleanupDelay must not be negative"))
	}
	if err := c.assignorConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// errDialerConflict is how kgo refuses a Dialer beside a DialTLSConfig.
const errDialerConflict = "cannot set both Dialer and DialTLSConfig"

// validateClientOptions checks that ClientOptions are valid franz-go
// options and leave Eddy's dialer alone. kgo offers no way to inspect
// options, but it refuses a Dialer beside a DialTLSConfig: adding one of
// them to the user's options reveals whether the options hold the other.
func (c Config) validateClientOptions() error {
	if len(c.ClientOptions) == 0 {
		return nil
	}
	conflicts := func(extra kgo.Opt) bool {
		err := kgo.ValidateOpts(append(slices.Clone(c.ClientOptions), extra)...)
		return err != nil && strings.Contains(err.Error(), errDialerConflict)
	}
	if err := kgo.ValidateOpts(c.ClientOptions...); err != nil {
		if strings.Contains(err.Error(), errDialerConflict) {
			return errors.New("ClientOptions set both kgo.Dialer and kgo.DialTLSConfig; Eddy dials every connection itself: remove both and set Config.TLS for TLS")
		}
		return fmt.Errorf("ClientOptions: %w", err)
	}
	if conflicts(kgo.Dialer(noDial)) {
		return errors.New("ClientOptions set kgo.DialTLSConfig, which franz-go cannot combine with the dialer Eddy gives every client: set Config.TLS instead")
	}
	if conflicts(kgo.DialTLSConfig(new(tls.Config))) {
		return errors.New("ClientOptions set kgo.Dialer, which would replace the dialer Eddy gives every client (it tracks every connection): remove it, and set Config.TLS for TLS")
	}
	return nil
}

// noDial stands in for Eddy's dialer while options are validated.
func noDial(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("not dialing")
}
