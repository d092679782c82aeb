package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/eddystreams/eddy/broker"
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
