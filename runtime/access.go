package runtime

import (
	"github.com/eddystreams/eddy/internal/groupproto"

	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/graph"
)

// AccessError is what Start returns when the application's principal lacks
// an ACL it needs on a secured cluster (see docs/operations.md's list): without it
// the group would never form, or every transaction would fail, and the
// instance would retry for ever without saying why.
type AccessError struct {
	// Resource is "group", "topic" or "transactional ID".
	Resource string
	// Name is the resource's name.
	Name string
	// Operations are the ACL operations missing on it, as Kafka names
	// them (Read, Write, Describe).
	Operations []string
	// Err is the broker's authorization error.
	Err error
}

func (e *AccessError) Error() string {
	return fmt.Sprintf("runtime: not authorized: the principal needs %s on %s %q (%v)",
		strings.Join(e.Operations, " and "), e.Resource, e.Name, e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// opsNotProvided is Kafka's answer for authorized operations it was not
// asked for or cannot compute.
const opsNotProvided = math.MinInt32

// hasOp reports whether a Kafka authorized-operations bit field includes op;
// a field the broker did not fill in includes everything, since nothing is
// known to be missing.
func hasOp(ops int32, op kmsg.ACLOperation) bool {
	return ops == opsNotProvided || ops&(1<<int32(op)) != 0
}

// checkGroupAccess and checkPlannedAccess ask the brokers, before any
// stream thread starts, whether the principal holds the ACLs the
// application needs on its group, its topics and (under exactly-once) its
// transactional IDs, and return every one it lacks. Only authorization
// errors count: anything else is left to the clients that follow, which
// retry or fail as they always did. Start runs the group's check alongside
// the topic plan and the others alongside the topic description.

// checkPlannedAccess checks what needs the topic plan: the topics and the
// transactional IDs.
func (a *App) checkPlannedAccess(ctx context.Context) error {
	errs := a.checkTopicAccess(ctx)
	if a.cfg.ProcessingGuarantee == ExactlyOnce {
		for i := range a.cfg.NumStreamThreads {
			if err := a.checkTxnAccess(ctx, fmt.Sprintf("%s-%s-%d", a.cfg.ApplicationID, a.dir.processID, i)); err != nil {
				errs = append(errs, err)
				break // the others are alike
			}
		}
	}
	return errors.Join(errs...)
}

// checkGroupAccess needs Read on the group: joining, heartbeats, offset
// fetches and commits all check it.
func (a *App) checkGroupAccess(ctx context.Context) error {
	group := a.cfg.ApplicationID
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, a.adminCl)
	if err == nil && len(resp.Groups) == 1 {
		g := resp.Groups[0]
		err = kerr.ErrorForCode(g.ErrorCode)
		if err == nil && !hasOp(g.AuthorizedOperations, kmsg.ACLOperationRead) {
			return &AccessError{Resource: "group", Name: group, Operations: []string{"Read"}, Err: kerr.GroupAuthorizationFailed}
		}
		if err == nil {
			// The group's table as it stands, for queries until this
			// instance's first assignment (router.learnGroup).
			if r, rerr := groupproto.GroupRouting(g); rerr == nil {
				a.startRouting = &r
			}
		}
	}
	if errors.Is(err, kerr.GroupAuthorizationFailed) {
		return &AccessError{Resource: "group", Name: group, Operations: []string{"Read"}, Err: err}
	}
	return nil
}

// checkTopicAccess needs Read on every topic the application reads (its
// sources, repartition topics and changelogs) and Write on every topic it
// writes (sinks, repartition topics, changelogs, the dead letter topic).
func (a *App) checkTopicAccess(ctx context.Context) []error {
	app := a.cfg.ApplicationID
	needs := make(map[string][]kmsg.ACLOperation)
	need := func(topic string, op kmsg.ACLOperation) {
		if !slices.Contains(needs[topic], op) {
			needs[topic] = append(needs[topic], op)
		}
	}
	for _, st := range graph.Of(a.topo).SubTopologies() {
		for _, r := range st.Sources {
			need(r.FullName(app), kmsg.ACLOperationRead)
		}
		for _, r := range st.Sinks {
			need(r.FullName(app), kmsg.ACLOperationWrite)
		}
	}
	for _, gs := range graph.Of(a.topo).GlobalStores() {
		need(gs.Topic, kmsg.ACLOperationRead)
	}
	for _, cls := range a.plan.changelogs {
		for _, c := range cls {
			need(c, kmsg.ACLOperationRead)
			need(c, kmsg.ACLOperationWrite)
		}
	}
	if a.cfg.DeadLetterTopic != "" {
		need(a.cfg.DeadLetterTopic, kmsg.ACLOperationWrite)
	}
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, name := range slices.Sorted(maps.Keys(needs)) {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, a.adminCl)
	if err != nil {
		return nil
	}
	var errs []error
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		var missing []string
		for _, op := range needs[name] {
			if !hasOp(t.AuthorizedOperations, op) {
				missing = append(missing, opName(op))
			}
		}
		terr := kerr.ErrorForCode(t.ErrorCode)
		if errors.Is(terr, kerr.TopicAuthorizationFailed) {
			missing = append([]string{"Describe"}, missing...)
		} else if terr != nil || len(missing) == 0 {
			continue
		} else {
			terr = kerr.TopicAuthorizationFailed
		}
		slices.Sort(missing)
		errs = append(errs, &AccessError{Resource: "topic", Name: name, Operations: slices.Compact(missing), Err: terr})
	}
	return errs
}

// checkTxnAccess needs Write on a transactional ID. No request reports the
// operations allowed on one; ending a transaction the ID does not have is
// refused for authorization before anything else, and changes nothing
// otherwise (Kafka answers it INVALID_PRODUCER_ID_MAPPING or the like).
func (a *App) checkTxnAccess(ctx context.Context, id string) error {
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = id
	req.ProducerID = -1
	req.ProducerEpoch = -1
	resp, err := req.RequestWith(ctx, a.adminCl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		return &AccessError{Resource: "transactional ID", Name: id, Operations: []string{"Write"}, Err: err}
	}
	return nil
}

// opName is an ACL operation as Kafka's documentation and tools spell it.
func opName(op kmsg.ACLOperation) string {
	switch op {
	case kmsg.ACLOperationRead:
		return "Read"
	case kmsg.ACLOperationWrite:
		return "Write"
	case kmsg.ACLOperationDescribe:
		return "Describe"
	}
	return op.String()
}
