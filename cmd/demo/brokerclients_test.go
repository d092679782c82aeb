package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/broker"
)

// securedBrokerProcess runs `demo broker` over TLS with SASL: superuser
// alice, and users bob (who may create, write and read topic "kt") and
// mallory (who may do nothing), ACLs checked. It returns the address and
// the CA file.
func securedBrokerProcess(ctx context.Context, t *testing.T) (addr, ca string) {
	t.Helper()
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	require.NoError(t, os.WriteFile(users, []byte("# name password\nbob bob-pw\nmallory mallory-pw\n"), 0o600))
	acls := filepath.Join(dir, "acls")
	require.NoError(t, os.WriteFile(acls, []byte("user=bob,op=create,topic=kt\n\nuser=bob,op=read,topic=k*\n"), 0o600))
	tlsDir := filepath.Join(dir, "tls")
	addr, stop := brokerProcess(ctx, t, "--listen", "127.0.0.1:0", "--tls-dir", tlsDir,
		"--sasl-user", "alice", "--sasl-password", "alice-pw", "--users", users,
		"--acl", "user=bob,op=write,topic=kt; user=mallory,op=read,topic=kt,deny", "--acl-file", acls)
	t.Cleanup(stop)
	return addr, filepath.Join(tlsDir, broker.CAFile)
}

// kcat runs kcat against addr over TLS as user with SCRAM-SHA-512.
func kcat(ctx context.Context, t *testing.T, addr, ca, user, pass, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "kcat", append([]string{"-b", addr,
		"-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + ca,
		"-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=" + user, "-X", "sasl.password=" + pass}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kcat (librdkafka) logs in to `demo broker` with SCRAM over TLS,
// produces and consumes; a wrong password is refused with Kafka's
// SASL_AUTHENTICATION_FAILED message, and a user without rights is
// refused by the ACLs.
func TestKcatThroughSASLOverTLS(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (Debian package kcat)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, ca := securedBrokerProcess(ctx, t)

	out, err := kcat(ctx, t, addr, ca, "bob", "bob-pw", "k1:v1\nk2:v2\n", "-P", "-t", "kt", "-K:")
	require.NoError(t, err, out)
	out, err = kcat(ctx, t, addr, ca, "bob", "bob-pw", "", "-C", "-t", "kt", "-o", "beginning", "-e", "-q", "-f", "%k=%s\\n")
	require.NoError(t, err, out)
	got := strings.Fields(out)
	slices.Sort(got)
	require.Equal(t, []string{"k1=v1", "k2=v2"}, got)

	out, err = kcat(ctx, t, addr, ca, "bob", "wrong", "", "-L", "-m", "5")
	require.Error(t, err)
	require.Contains(t, out, "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")

	out, err = kcat(ctx, t, addr, ca, "mallory", "mallory-pw", "k3:v3\n", "-P", "-t", "kt", "-K:")
	require.Error(t, err)
	require.Contains(t, out, "Topic authorization failed")
	out, err = kcat(ctx, t, addr, ca, "mallory", "mallory-pw", "", "-C", "-t", "kt", "-o", "beginning", "-e", "-q")
	require.Error(t, err)
	require.Contains(t, out, "Topic authorization failed")
}

// kafkaPython returns a Python interpreter that has kafka-python, or "".
func kafkaPython() string {
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import kafka").Run() == nil {
			return py
		}
	}
	return ""
}

// kafkaPythonScript produces one record as a user with SCRAM-SHA-512 over
// TLS, then reads the topic from the start until it has read n records.
const kafkaPythonScript = `
import sys
from kafka import KafkaProducer, KafkaConsumer
addr, ca, user, pw, topic, n = sys.argv[1:7]
seen = 0
common = dict(bootstrap_servers=addr, security_protocol='SASL_SSL', ssl_cafile=ca,
              sasl_mechanism='SCRAM-SHA-512', sasl_plain_username=user, sasl_plain_password=pw)
p = KafkaProducer(**common)
p.send(topic, key=b'py', value=b'from-python').get(timeout=30)
p.close()
c = KafkaConsumer(topic, group_id=None, auto_offset_reset='earliest', consumer_timeout_ms=30000, **common)
for m in c:
    print('%s=%s' % ((m.key or b'').decode(), m.value.decode()))
    seen += 1
    if seen == int(n):
        break
c.close()
`

// kafka-python, which authenticates with SaslHandshake v0 and bare SASL
// tokens, logs in to `demo broker` with SCRAM over TLS, produces and
// consumes.
func TestKafkaPythonThroughSASLOverTLS(t *testing.T) {
	py := kafkaPython()
	if py == "" {
		t.Skip("kafka-python is not installed (Debian package python3-kafka)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, ca := securedBrokerProcess(ctx, t)

	// Written first from Go, so the script reads a record it did not write.
	_, stderr, err := runCmd(ctx, "from-go\n", "produce", "--brokers", addr, "--topic", "kt",
		"--tls-ca", ca, "--sasl-user", "bob", "--sasl-password", "bob-pw")
	require.NoError(t, err, stderr)
	out, err := exec.CommandContext(ctx, py, "-c", kafkaPythonScript, addr, ca, "bob", "bob-pw", "kt", "2").CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Fields(string(out))
	slices.Sort(lines)
	require.Equal(t, []string{"=from-go", "py=from-python"}, lines, "the record from Go and the script's own")

	out, err = exec.CommandContext(ctx, py, "-c", kafkaPythonScript, addr, ca, "bob", "wrong", "kt", "1").CombinedOutput()
	require.Error(t, err, "a wrong password gets nowhere: %s", out)
}

func TestParseACLRule(t *testing.T) {
	r, err := parseACLRule("user=bob,op=read,topic=eddy-*")
	require.NoError(t, err)
	require.Equal(t, "bob", r.user)
	require.Equal(t, broker.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "eddy-", Pattern: kmsg.ACLResourcePatternTypePrefixed,
		Operation: kmsg.ACLOperationRead, Allow: true}, r.acl)

	r, err = parseACLRule("user=bob,op=idempotent_write,cluster,deny")
	require.NoError(t, err)
	require.Equal(t, broker.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Operation: kmsg.ACLOperationIdempotentWrite}, r.acl)

	r, err = parseACLRule("user=bob,op=describe,group=*")
	require.NoError(t, err)
	require.Equal(t, "*", r.acl.Name, "* alone is Kafka's literal wildcard")
	require.Equal(t, kmsg.ACLResourcePatternTypeLiteral, r.acl.Pattern)

	for _, bad := range []string{
		"op=read,topic=t", "user=bob,topic=t", "user=bob,op=read", "user=bob,op=reed,topic=t",
		"user=bob,op=read,topic=t,group=g", "user=bob,op=read,topic=", "user=bob,op=read,cluster=x", "user=bob,op=read,topic=t,host=h",
	} {
		_, err := parseACLRule(bad)
		require.Error(t, err, bad)
	}
}

// The broker refuses rules for unknown users and never echoes a password
// from a malformed --users line.
func TestBrokerCommandACLErrors(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	require.NoError(t, os.WriteFile(users, []byte("bob s3cret extra\n"), 0o600))
	_, stderr, err := runCmd(ctx, "", "broker", "--listen", "127.0.0.1:0", "--users", users)
	require.ErrorIs(t, err, errUsage)
	require.Contains(t, stderr, "line 1: want NAME PASSWORD")
	require.NotContains(t, stderr, "s3cret")

	require.NoError(t, os.WriteFile(users, []byte("bob s3cret\n"), 0o600))
	_, stderr, err = runCmd(ctx, "", "broker", "--listen", "127.0.0.1:0", "--users", users, "--acl", "user=carol,op=read,topic=t")
	require.ErrorIs(t, err, errUsage)
	require.Contains(t, stderr, `user "carol" is not in --users`)
}
