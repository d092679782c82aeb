// Package changelog connects Eddy's local state stores to Kafka: it names and
// creates changelog topics, sends a store's dirty writes to its changelog
// partition, and reads changelogs back into stores, either once to the end
// (restoring an active task's state) or indefinitely (keeping a standby
// replica current), measuring lag as it goes.
//
// The package knows topics, partitions and stores, never tasks: the runtime
// decides which store follows which partition and in which mode.
package changelog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicName returns the changelog topic of store in application app:
// "<app>-<store>-changelog", the name Kafka Streams uses, so tooling that
// knows one knows the other.
func TopicName(app, store string) string { return app + "-" + store + "-changelog" }

// TopicSpec describes a topic EnsureTopics must make exist.
type TopicSpec struct {
	// Name is the full topic name on the broker.
	Name string
	// Partitions is the required partition count. -1 creates a missing
	// topic with the broker's default (num.partitions) and accepts any
	// count of an existing one; the caller lists the topic to learn it.
	Partitions int32
	// Compacted sets cleanup.policy=compact unless Configs sets
	// cleanup.policy itself (windowed stores want "compact,delete").
	Compacted bool
	// ReplicationFactor for a new topic; 0 or -1 means the broker default.
	ReplicationFactor int16
	// Configs are extra topic configs for a new topic.
	Configs map[string]*string
}

// PartitionMismatchError reports an existing topic whose partition count is
// not the one the topology needs. The topic must be fixed by hand (or the
// application reset): data already in it is partitioned by the old count.
type PartitionMismatchError struct {
	Topic    string
	Expected int32
	Actual   int32
}

// Error names the topic and both counts.
func (e *PartitionMismatchError) Error() string {
	return fmt.Sprintf("changelog: topic %q has %d partitions, expected %d", e.Topic, e.Actual, e.Expected)
}

// Create-then-verify needs the broker's metadata to show a topic that
// another instance just created; these bound how long we wait for that.
const (
	visibleAttempts = 150
	visibleBackoff  = 100 * time.Millisecond
)

// EnsureTopics makes every topic in specs exist with its partition count:
// missing topics are created, existing ones are checked. A topic with the
// wrong partition count yields a *PartitionMismatchError (several are
// joined). A topic that another instance creates concurrently is not an
// error; it is verified like any existing topic. EnsureTopics returns once
// every topic is visible in the cluster's metadata, so producers and
// offset listings that follow do not race the creation.
func EnsureTopics(ctx context.Context, adm *kadm.Client, specs []TopicSpec) error {
	if len(specs) == 0 {
		return nil
	}
	byName := make(map[string]TopicSpec, len(specs))
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		if s.Name == "" {
			return errors.New("changelog: topic spec without a name")
		}
		if s.Partitions <= 0 && s.Partitions != -1 {
			return fmt.Errorf("changelog: topic %q: partitions must be positive or -1, got %d", s.Name, s.Partitions)
		}
		if prev, dup := byName[s.Name]; dup {
			if prev.Partitions != s.Partitions {
				return fmt.Errorf("changelog: topic %q specified twice with %d and %d partitions", s.Name, prev.Partitions, s.Partitions)
			}
			continue
		}
		byName[s.Name] = s
		names = append(names, s.Name)
	}

	details, err := listTopicsUncached(ctx, adm, names)
	if err != nil {
		return fmt.Errorf("changelog: describing topics: %w", err)
	}
	var errs []error
	var created []string
	for _, name := range names {
		d, ok := details[name]
		switch {
		case ok && d.Err == nil:
			if err := checkPartitions(byName[name], d); err != nil {
				errs = append(errs, err)
			}
			continue
		case ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("changelog: describing topic %q: %w", name, d.Err))
			continue
		}
		if err := createTopic(ctx, adm, byName[name]); err != nil {
			errs = append(errs, err)
			continue
		}
		created = append(created, name)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return awaitTopics(ctx, adm, byName, created)
}

func createTopic(ctx context.Context, adm *kadm.Client, s TopicSpec) error {
	configs := make(map[string]*string, len(s.Configs)+1)
	maps.Copy(configs, s.Configs)
	if _, set := configs["cleanup.policy"]; s.Compacted && !set {
		configs["cleanup.policy"] = kadm.StringPtr("compact")
	}
	rf := s.ReplicationFactor
	if rf == 0 {
		rf = -1
	}
	_, err := adm.CreateTopic(ctx, s.Partitions, rf, configs, s.Name)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("changelog: creating topic %q: %w", s.Name, err)
	}
	// TopicAlreadyExists means we lost a creation race; the winner's
	// partition count is checked in awaitTopics.
	return nil
}

// awaitTopics waits until every named topic shows up in metadata and then
// checks its partition count. A freshly created topic can be missing from
// (or partially present in) metadata for a short while.
func awaitTopics(ctx context.Context, adm *kadm.Client, specs map[string]TopicSpec, names []string) error {
	pending := names
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 0 {
			if attempt >= visibleAttempts {
				return fmt.Errorf("changelog: topics %v not visible in metadata after creation", pending)
			}
			t := time.NewTimer(visibleBackoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("changelog: waiting for topics %v: %w", pending, ctx.Err())
			case <-t.C:
			}
		}
		details, err := listTopicsUncached(ctx, adm, pending)
		if err != nil {
			return fmt.Errorf("changelog: describing topics: %w", err)
		}
		var still []string
		var errs []error
		for _, name := range pending {
			d, ok := details[name]
			if !ok || d.Err != nil || !allLeadersKnown(d) {
				still = append(still, name)
				continue
			}
			if err := checkPartitions(specs[name], d); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		pending = still
	}
	return nil
}

// listTopicsUncached describes topics with a fresh metadata request. kadm
// otherwise answers from the client's metadata cache, which goes on
// reporting a just-created topic as missing for up to MetadataMinAge (5s by
// default). kadm (v1.20) sends a request that asks for authorized
// operations straight to the broker; should that change, awaitTopics still
// converges once the cache entry ages out.
func listTopicsUncached(ctx context.Context, adm *kadm.Client, names []string) (kadm.TopicDetails, error) {
	return adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
}

func allLeadersKnown(d kadm.TopicDetail) bool {
	if len(d.Partitions) == 0 {
		return false
	}
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

func checkPartitions(s TopicSpec, d kadm.TopicDetail) error {
	if s.Partitions < 0 {
		return nil
	}
	if got := int32(len(d.Partitions)); got != s.Partitions {
		return &PartitionMismatchError{Topic: s.Name, Expected: s.Partitions, Actual: got}
	}
	return nil
}
