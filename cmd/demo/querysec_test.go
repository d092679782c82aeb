package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeSelfSigned writes a certificate for 127.0.0.1 that is its own CA,
// and its key, as PEM files.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "demo query test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

// `demo instance` with --query-tls-* and a token serves HTTPS and refuses
// queries without the token; `demo query` with the CA and the token reads.
func TestInstanceServesQueriesOverTLSWithToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := startBroker(t)
	brokers := strings.Join(b.Addrs(), ",")
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600))

	_, _, err := runCmd(ctx, "alpha beta alpha\n", "produce", "--brokers", brokers)
	require.NoError(t, err)

	ictx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ictx, []string{"instance", "--brokers", brokers, "--state-dir", filepath.Join(dir, "state"), "--http", "127.0.0.1:0",
			"--query-tls-cert", cert, "--query-tls-key", key, "--query-tls-ca", cert, "--query-token-file", tokenFile},
			stdio{in: strings.NewReader(""), out: pw, err: io.Discard})
		pw.Close()
	}()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	go io.Copy(io.Discard, br) // the instance must not block on its output
	_, addr, ok := strings.Cut(strings.TrimSpace(line), "serving on ")
	require.True(t, ok, "first line: %q", line)
	require.True(t, strings.HasPrefix(addr, "https://"), "serves HTTPS: %q", line)

	t.Setenv(queryTokenEnv, "")
	var out string
	require.Eventually(t, func() bool {
		out, _, err = runCmd(ctx, "", "query", "--http", addr, "--query-tls-ca", cert, "--query-token-file", tokenFile, "alpha")
		return err == nil && strings.HasPrefix(out, "alpha: 2\n")
	}, 60*time.Second, 100*time.Millisecond, "last: %q %v", out, err)

	_, _, err = runCmd(ctx, "", "query", "--http", addr, "--query-tls-ca", cert, "alpha")
	require.ErrorContains(t, err, "401")
	require.ErrorContains(t, err, "unauthorized")

	// beta's partition may belong to a thread that has not committed yet
	// when alpha's has: until then the answer is truthfully "not counted".
	t.Setenv(queryTokenEnv, "tok-123")
	require.Eventually(t, func() bool {
		out, _, err = runCmd(ctx, "", "query", "--http", addr, "--query-tls-ca", cert, "beta")
		return err == nil && strings.HasPrefix(out, "beta: 1\n")
	}, 60*time.Second, 100*time.Millisecond, "the token from $%s; last: %q %v", queryTokenEnv, out, err)

	_, _, err = runCmd(ctx, "", "query", "--http", strings.TrimPrefix(addr, "https://"), "alpha")
	require.Error(t, err, "plain HTTP to an HTTPS port is no answer")

	// The status command and the page's cluster view ask the instances
	// over HTTPS with the token too.
	out, _, err = runCmd(ctx, "", "status", "--http", addr, "--query-tls-ca", cert)
	require.NoError(t, err, out)
	require.NotContains(t, out, "unreachable")
	// Not a 401, which the instance's port number may contain.
	require.NotRegexp(t, `(^|[\s(])401\b`, out)
	require.Regexp(t, `(?m)\sok$`, out, "the instance's status")
	var view pageView
	require.NoError(t, getJSON(ctx, peerClient(true, mustPool(t, cert), ""), strings.TrimPrefix(addr, "https://"), "/cluster.json", &view))
	require.Len(t, view.Instances, 1)
	require.Empty(t, view.Instances[0].Error, "the page's own view of the instance")
	// The page shows the counts store's partitions, where the window
	// stores' replicas are too (the same tasks).
	require.Equal(t, 3, view.Instances[0].Actives)
	require.Len(t, view.Rows, 3)
	for _, r := range view.Rows {
		require.Equal(t, countsStore, r.Store)
		require.Equal(t, "active", r.Cells[0].Role, "%+v", r)
		require.False(t, r.Cells[0].Unconfirmed, "the instance's lags were read: %+v", r)
	}
}

func mustPool(t *testing.T, certFile string) *tls.Config {
	t.Helper()
	b, err := os.ReadFile(certFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(b))
	return &tls.Config{RootCAs: pool}
}
