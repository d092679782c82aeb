package iq

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// selfSigned makes a certificate for 127.0.0.1 that is its own CA, and
// the pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "eddy query test"},
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
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// secureCluster is two fake instances serving HTTPS and requiring token;
// instance 1 holds the only replica, the active of partition 0.
func secureCluster(t *testing.T, token string) ([]*httptest.Server, *x509.CertPool) {
	cert, pool := selfSigned(t)
	var (
		srvs []*httptest.Server
		bes  []*fakeBackend
	)
	for range 2 {
		var s *Server
		hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.ServeHTTP(w, r) }))
		b := newFakeBackend(hs.Listener.Addr().String(), map[string]int32{testStore: 1})
		s = NewServer(b, ServerConfig{
			TLS:        &tls.Config{Certificates: []tls.Certificate{cert}},
			ForwardTLS: &tls.Config{RootCAs: pool},
			Token:      token,
		}, countsCodec())
		hs.TLS = s.HTTPServer("").TLSConfig
		hs.StartTLS()
		t.Cleanup(func() { hs.Close(); s.Close() })
		srvs, bes = append(srvs, hs), append(bes, b)
	}
	bes[1].add(testStore, 0, RoleActive).put(t, "w", 7)
	m := Metadata{Partitions: map[string]int32{testStore: 1}, Hosts: []HostMetadata{
		{Host: bes[0].self}, {Host: bes[1].self, Active: []StorePartition{{testStore, 0}}},
	}}
	for _, b := range bes {
		b.setMeta(m, nil)
	}
	return srvs, pool
}

// get asks u over HTTPS trusting pool, with token as bearer unless empty.
func get(t *testing.T, pool *x509.CertPool, u, token string) (int, http.Header, map[string]any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	if len(body) > 0 {
		require.NoError(t, json.Unmarshal(body, &m), "body %s", body)
	}
	return resp.StatusCode, resp.Header, m
}

// With TLS and a token, a lookup asked of the instance without the replica
// is forwarded over HTTPS with the token and answered; requests without
// the token, or with another, are refused 401 (health probes excepted);
// the Go client with the CA and token reads, and with a wrong token gets
// ErrUnauthorized.
func TestQueriesOverTLSWithBearerToken(t *testing.T) {
	noLeaks(t)
	const token = "s3cret-token"
	srvs, pool := secureCluster(t, token)
	keyPath := "/v1/stores/" + testStore + "/keys/w"

	status, _, body := get(t, pool, srvs[0].URL+keyPath, token)
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.EqualValues(t, 7, body["value"])
	host, role := servedBody(t, body)
	require.Equal(t, srvs[1].Listener.Addr().String(), host, "forwarded to the active over HTTPS")
	require.Equal(t, "active", role)

	for _, tok := range []string{"", "wrong"} {
		for _, path := range []string{keyPath, "/v1/metadata", "/v1/lags", "/v1/stores/" + testStore + "/range"} {
			status, hdr, body := get(t, pool, srvs[0].URL+path, tok)
			require.Equal(t, http.StatusUnauthorized, status, "%s with token %q: %v", path, tok, body)
			require.Equal(t, "unauthorized", body["reason"])
			require.Contains(t, hdr.Get("WWW-Authenticate"), "Bearer")
		}
	}
	status, _, _ = get(t, pool, srvs[0].URL+"/healthz", "")
	require.NotEqual(t, http.StatusUnauthorized, status, "health probes need no token")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := NewClient([]string{srvs[0].Listener.Addr().String()}, ClientOptions{TLS: &tls.Config{RootCAs: pool}, Token: token})
	require.NoError(t, err)
	defer cl.Close()
	res, err := ClientGet[string, int64](ctx, cl, testStore, "w", serde.String)
	require.NoError(t, err)
	require.EqualValues(t, 7, res.Value)

	bad, err := NewClient([]string{srvs[0].URL}, ClientOptions{TLS: &tls.Config{RootCAs: pool}, Token: "wrong"})
	require.NoError(t, err)
	defer bad.Close()
	_, err = ClientGet[string, int64](ctx, bad, testStore, "w", serde.String)
	require.Error(t, err)
	require.True(t, errors.Is(err, ErrUnauthorized), "got %v", err)
}
