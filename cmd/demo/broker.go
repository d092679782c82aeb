package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/broker"
)

// defaultBrokerListen is Kafka's customary port, so that other Kafka tools
// find the demo broker without being told where it is.
const defaultBrokerListen = "127.0.0.1:9092"

// runBroker is `demo broker`: the embedded broker as a process of its own,
// until ctx is cancelled. It prints "listening on HOST:PORT" to s.out once
// clients can connect, which is how a caller that asked for port 0 learns
// the port.
func runBroker(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("broker", brokerSynopsis, s)
	listen := fs.String("listen", defaultBrokerListen, "`HOST:PORT` to listen on (port 0 picks a free port)")
	dataDir := fs.String("data-dir", "", "`DIR` to keep topics, records and offsets in across restarts (default: memory only)")
	partitions := fs.Int("partitions", int(broker.DefaultPartitions), "partition count of automatically created topics")
	var logs logFlags
	logs.add(fs, "warn")
	tlsDir := fs.String("tls-dir", "", "serve TLS only, with the test CA and certificates in `DIR` (made there if "+broker.CAFile+" is missing; clients use --tls-ca DIR/"+broker.CAFile+")")
	saslMech := fs.String("sasl-mechanism", broker.MechanismSCRAMSHA512, "SASL `MECHANISM` of --sasl-user: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	saslUser := fs.String("sasl-user", "", "require SASL, with this `USER` as a superuser (it passes every ACL check)")
	saslPass := fs.String("sasl-password", "", "password of --sasl-user (default: $"+saslPasswordEnv+")")
	usersFile := fs.String("users", "", "`FILE` of SASL users who are not superusers, one \"NAME PASSWORD\" a line, each able to log in with any mechanism; what they may do is what --acl allows")
	acl := fs.String("acl", "", "turn ACL checks on and allow a --users user operations, by `RULES` separated by ';', each user=NAME,op=OPERATION,RESOURCE=NAME[,deny]: RESOURCE is topic, group or transactional-id (NAME* a prefix, * any), or cluster without a name; deny makes it a deny rule")
	aclFile := fs.String("acl-file", "", "`FILE` of --acl rules, one a line")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *listen == "" {
		return usageErrorf(fs, "--listen must not be empty")
	}
	if *partitions < 1 || *partitions > math.MaxInt32 {
		return usageErrorf(fs, "--partitions must be at least 1, got %d", *partitions)
	}
	logger, err := logs.logger(s.err)
	if err != nil {
		return usageErrorf(fs, "%v", err)
	}

	cfg := broker.Config{
		Listen:     *listen,
		DataDir:    *dataDir,
		Partitions: int32(*partitions),
		Logger:     logger,
	}
	if *tlsDir != "" {
		certs, err := brokerCerts(*tlsDir, *listen)
		if err != nil {
			return fmt.Errorf("--tls-dir: %w", err)
		}
		if cfg.TLS, err = certs.ServerTLS(false); err != nil {
			return fmt.Errorf("--tls-dir: %w", err)
		}
	}
	if *saslUser != "" {
		pass := *saslPass
		if pass == "" {
			pass = os.Getenv(saslPasswordEnv)
		}
		if pass == "" {
			return usageErrorf(fs, "--sasl-user needs a password: --sasl-password or $%s", saslPasswordEnv)
		}
		cfg.Users = []broker.User{{Mechanism: *saslMech, Name: *saslUser, Password: pass, Superuser: true}}
	}
	var rules aclRules
	for rule := range strings.SplitSeq(*acl, ";") {
		if strings.TrimSpace(rule) == "" {
			continue
		}
		if err := rules.add(rule); err != nil {
			return usageErrorf(fs, "--acl: %v", err)
		}
	}
	if *aclFile != "" {
		if err := rules.readFile(*aclFile); err != nil {
			return usageErrorf(fs, "--acl-file: %v", err)
		}
	}
	var users []broker.User
	if *usersFile != "" {
		var err error
		if users, err = readUsers(*usersFile, rules); err != nil {
			return usageErrorf(fs, "--users: %v", err)
		}
	}
	if err := rules.checkUsers(users); err != nil {
		return usageErrorf(fs, "%v", err)
	}
	cfg.Users = append(cfg.Users, users...)
	cfg.EnableACLs = len(rules) > 0
	b, err := broker.Start(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "listening on %s\n", strings.Join(b.Addrs(), ","))
	if *tlsDir != "" {
		fmt.Fprintf(s.out, "TLS: clients verify with --tls-ca %s\n", filepath.Join(*tlsDir, broker.CAFile))
	}
	if len(rules) > 0 {
		fmt.Fprintf(s.out, "ACLs: %d rules checked\n", len(rules))
	}
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(s.out, "broker stopped")
	return nil
}

// brokerCerts reads the test certificates in dir, or makes them there
// (for the listen host, localhost and the loopback addresses) if dir holds
// no CA yet.
func brokerCerts(dir, listen string) (*broker.Certs, error) {
	if _, err := os.Stat(filepath.Join(dir, broker.CAFile)); err == nil {
		return broker.ReadCerts(dir)
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" && !slices.Contains(hosts, h) {
		hosts = append(hosts, h)
	}
	certs, err := broker.GenerateCerts(hosts...)
	if err != nil {
		return nil, err
	}
	return certs, certs.WriteFiles(dir)
}

// aclRule is one --acl: a rule for one user.
type aclRule struct {
	user string
	acl  broker.ACL
}

// aclRules are the rules of --acl and the lines of --acl-file.
type aclRules []aclRule

func (r *aclRules) add(v string) error {
	rule, err := parseACLRule(v)
	if err != nil {
		return err
	}
	*r = append(*r, rule)
	return nil
}

// readFile adds the rules of path, one a line; blank lines and lines
// starting with # are skipped.
func (r *aclRules) readFile(path string) error {
	return eachLine(path, func(n int, line string) error {
		if err := r.add(line); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		return nil
	})
}

// checkUsers reports rules for users not among users: ACLs apply to the
// --users users only (the --sasl-user superuser passes every check).
func (r aclRules) checkUsers(users []broker.User) error {
	for _, rule := range r {
		if !slices.ContainsFunc(users, func(u broker.User) bool { return u.Name == rule.user }) {
			return fmt.Errorf("--acl: user %q is not in --users (the --sasl-user superuser needs no ACLs)", rule.user)
		}
	}
	return nil
}

// parseACLRule parses user=NAME,op=OPERATION,RESOURCE=NAME[,deny].
func parseACLRule(v string) (aclRule, error) {
	rule := aclRule{acl: broker.ACL{Allow: true, Pattern: kmsg.ACLResourcePatternTypeLiteral}}
	var haveOp, haveResource bool
	for field := range strings.SplitSeq(v, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch key {
		case "user":
			rule.user = val
		case "op":
			op, err := kmsg.ParseACLOperation(val)
			if err != nil || op == kmsg.ACLOperationAny {
				return rule, fmt.Errorf("unknown operation %q in %q", val, v)
			}
			rule.acl.Operation, haveOp = op, true
		case "topic", "group", "transactional-id", "cluster":
			if haveResource {
				return rule, fmt.Errorf("more than one resource in %q", v)
			}
			haveResource = true
			rule.acl.Resource, _ = kmsg.ParseACLResourceType(key)
			rule.acl.Name = val
			if key == "cluster" {
				if val != "" {
					return rule, fmt.Errorf("cluster takes no name in %q", v)
				}
				rule.acl.Name = "kafka-cluster" // Kafka's name for the cluster resource
				break
			}
			if prefix, ok := strings.CutSuffix(val, "*"); ok && prefix != "" {
				rule.acl.Name, rule.acl.Pattern = prefix, kmsg.ACLResourcePatternTypePrefixed
			}
			if rule.acl.Name == "" {
				return rule, fmt.Errorf("%s needs a name in %q", key, v)
			}
		case "deny":
			rule.acl.Allow = false
		default:
			return rule, fmt.Errorf("unknown field %q in %q (want user=, op=, topic=, group=, transactional-id=, cluster or deny)", key, v)
		}
	}
	switch {
	case rule.user == "":
		return rule, fmt.Errorf("no user= in %q", v)
	case !haveOp:
		return rule, fmt.Errorf("no op= in %q", v)
	case !haveResource:
		return rule, fmt.Errorf("no topic=, group=, transactional-id= or cluster in %q", v)
	}
	return rule, nil
}

// readUsers reads --users: "NAME PASSWORD" lines, blank lines and lines
// starting with # skipped. Each user gets one broker.User per mechanism,
// so that any client logs in as it likes, each with the user's rules.
func readUsers(path string, rules aclRules) ([]broker.User, error) {
	var users []broker.User
	seen := make(map[string]bool)
	err := eachLine(path, func(n int, line string) error {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			// The line holds a password: never quote it.
			return fmt.Errorf("line %d: want NAME PASSWORD", n)
		}
		name := fields[0]
		if seen[name] {
			return fmt.Errorf("line %d: user %q given twice", n, name)
		}
		seen[name] = true
		var acls []broker.ACL
		for _, r := range rules {
			if r.user == name {
				acls = append(acls, r.acl)
			}
		}
		for _, mech := range []string{broker.MechanismPlain, broker.MechanismSCRAMSHA256, broker.MechanismSCRAMSHA512} {
			users = append(users, broker.User{Mechanism: mech, Name: name, Password: fields[1], ACLs: acls})
		}
		return nil
	})
	return users, err
}

// eachLine calls fn with each line of path that is neither blank nor a #
// comment, trimmed, and its 1-based number.
func eachLine(path string, fn func(n int, line string) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(i+1, line); err != nil {
			return err
		}
	}
	return nil
}
