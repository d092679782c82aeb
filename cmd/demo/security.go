package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
)

// saslPasswordEnv is read for the SASL password when --sasl-password is
// not given, so that the password need not appear in the process list.
const saslPasswordEnv = "EDDY_SASL_PASSWORD"

// securityFlags are the flags by which a client command reaches a broker
// that requires TLS or SASL.
type securityFlags struct {
	tls, insecure                         *bool
	caFile, certFile, keyFile, serverName *string
	mechanism, user, password             *string
}

func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	return &securityFlags{
		tls:        fs.Bool("tls", false, "connect to the brokers over TLS, verifying them against the system's roots (implied by the other --tls-* flags)"),
		caFile:     fs.String("tls-ca", "", "PEM `FILE` of the CA certificates to verify the brokers against"),
		certFile:   fs.String("tls-cert", "", "PEM `FILE` of a client certificate, for brokers that require one (with --tls-key)"),
		keyFile:    fs.String("tls-key", "", "PEM `FILE` of the client certificate's key"),
		serverName: fs.String("tls-server-name", "", "`NAME` the brokers' certificates must carry (default: the host dialed)"),
		insecure:   fs.Bool("tls-insecure-skip-verify", false, "accept any broker certificate: for tests only, it lets anyone in the middle read everything"),
		mechanism:  fs.String("sasl-mechanism", "", "SASL `MECHANISM`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default SCRAM-SHA-512 when --sasl-user is set)"),
		user:       fs.String("sasl-user", "", "SASL `USER` to authenticate as"),
		password:   fs.String("sasl-password", "", "SASL `PASSWORD` (default: $"+saslPasswordEnv+")"),
	}
}

// resolve returns the TLS configuration and SASL mechanism the flags ask
// for; either is nil when not asked for.
func (f *securityFlags) resolve() (*tls.Config, sasl.Mechanism, error) {
	var cfg *tls.Config
	if *f.tls || *f.caFile != "" || *f.certFile != "" || *f.keyFile != "" || *f.serverName != "" || *f.insecure {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: *f.serverName, InsecureSkipVerify: *f.insecure} //nolint:gosec // only on request, for tests
		if *f.caFile != "" {
			pem, err := os.ReadFile(*f.caFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("--tls-ca: no PEM certificate in %s", *f.caFile)
			}
		}
		if (*f.certFile == "") != (*f.keyFile == "") {
			return nil, nil, errors.New("--tls-cert and --tls-key go together")
		}
		if *f.certFile != "" {
			kp, err := tls.LoadX509KeyPair(*f.certFile, *f.keyFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
	}
	if *f.user == "" {
		if *f.mechanism != "" || *f.password != "" {
			return nil, nil, errors.New("--sasl-mechanism and --sasl-password need --sasl-user")
		}
		return cfg, nil, nil
	}
	mech := *f.mechanism
	if mech == "" {
		mech = broker.MechanismSCRAMSHA512
	}
	pass := *f.password
	if pass == "" {
		pass = os.Getenv(saslPasswordEnv)
	}
	if pass == "" {
		return nil, nil, fmt.Errorf("--sasl-user needs a password: --sasl-password or $%s", saslPasswordEnv)
	}
	m, err := broker.ClientMechanism(mech, *f.user, pass)
	if err != nil {
		return nil, nil, fmt.Errorf("--sasl-mechanism: %w", err)
	}
	return cfg, m, nil
}

// clientOpts are the franz-go options for a plain client (not an Eddy
// instance, which takes TLS and SASL through runtime.Config).
func clientOpts(tlsCfg *tls.Config, mech sasl.Mechanism) []kgo.Opt {
	var opts []kgo.Opt
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts
}

// queryTokenEnv is read for the query API's bearer token when no
// --query-token-file is given; a token is never a plain flag, so it does not
// appear in the process list.
const queryTokenEnv = "EDDY_QUERY_TOKEN"

// queryFlags secure the query API: an instance serves it over TLS and
// requires a bearer token; `demo query` and forwarding instances present
// them.
type queryFlags struct {
	certFile, keyFile, caFile, tokenFile *string
}

// addQueryServerFlags adds the flags of an instance's query server.
func addQueryServerFlags(fs *flag.FlagSet) *queryFlags {
	return &queryFlags{
		certFile:  fs.String("query-tls-cert", "", "PEM `FILE` of the certificate to serve queries over HTTPS with (with --query-tls-key); the other instances must serve HTTPS too"),
		keyFile:   fs.String("query-tls-key", "", "PEM `FILE` of the query certificate's key"),
		caFile:    fs.String("query-tls-ca", "", "PEM `FILE` of the CA certificates to verify the other instances against when forwarding queries (default: the system's roots)"),
		tokenFile: fs.String("query-token-file", "", "`FILE` holding the bearer token every query must carry, forwarded ones included (default: $"+queryTokenEnv+"; none: the port must be private)"),
	}
}

// addQueryClientFlags adds the flags by which `demo query` reaches a
// secured query API.
func addQueryClientFlags(fs *flag.FlagSet) *queryFlags {
	return &queryFlags{
		caFile:    fs.String("query-tls-ca", "", "PEM `FILE` of the CA certificates to verify the instance against; asks over HTTPS (as does an https:// --http)"),
		tokenFile: fs.String("query-token-file", "", "`FILE` holding the query API's bearer token (default: $"+queryTokenEnv+")"),
	}
}

// token returns the bearer token, from the file or the environment.
func (f *queryFlags) token() (string, error) {
	if *f.tokenFile == "" {
		return strings.TrimSpace(os.Getenv(queryTokenEnv)), nil
	}
	b, err := os.ReadFile(*f.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--query-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--query-token-file: %s is empty", *f.tokenFile)
	}
	return tok, nil
}

// roots returns the CA pool of --query-tls-ca, nil when not given.
func (f *queryFlags) roots() (*x509.CertPool, error) {
	if *f.caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(*f.caFile)
	if err != nil {
		return nil, fmt.Errorf("--query-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--query-tls-ca: no PEM certificate in %s", *f.caFile)
	}
	return pool, nil
}

// serverConfig fills the security settings of an instance's query server.
func (f *queryFlags) serverConfig(cfg *iq.ServerConfig) error {
	tok, err := f.token()
	if err != nil {
		return err
	}
	cfg.Token = tok
	if (*f.certFile == "") != (*f.keyFile == "") {
		return errors.New("--query-tls-cert and --query-tls-key go together")
	}
	pool, err := f.roots()
	if err != nil {
		return err
	}
	if *f.certFile == "" {
		if pool != nil {
			return errors.New("--query-tls-ca needs --query-tls-cert and --query-tls-key: instances forward over HTTPS only when they serve it")
		}
		return nil
	}
	kp, err := tls.LoadX509KeyPair(*f.certFile, *f.keyFile)
	if err != nil {
		return fmt.Errorf("--query-tls-cert/--query-tls-key: %w", err)
	}
	cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	cfg.ForwardTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	return nil
}

// client returns the TLS configuration (nil for plain HTTP) and token a
// query command uses; useTLS says whether the address asked for https.
func (f *queryFlags) client(useTLS bool) (*tls.Config, string, error) {
	tok, err := f.token()
	if err != nil {
		return nil, "", err
	}
	pool, err := f.roots()
	if err != nil {
		return nil, "", err
	}
	if pool == nil && !useTLS {
		return nil, tok, nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, tok, nil
}

// peerTransport carries the demo's own requests to query servers (the
// status page gathering lags and histories, `demo status`): it turns them
// to https when the servers serve TLS, and adds the bearer token, so the
// callers keep building plain http:// URLs.
type peerTransport struct {
	base   http.RoundTripper
	https  bool
	token  string
	secure bool // https or token: the request is rewritten
}

func (t *peerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !t.secure {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	if t.https && r.URL.Scheme == "http" {
		r.URL.Scheme = "https"
	}
	if t.token != "" {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(r)
}

// peerClient returns an HTTP client for the query servers: over TLS
// verified with tc when useTLS, with token when not empty.
func peerClient(useTLS bool, tc *tls.Config, token string) *http.Client {
	base := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second, TLSClientConfig: tc}
	return &http.Client{Transport: &peerTransport{base: base, https: useTLS, token: token, secure: useTLS || token != ""}}
}
