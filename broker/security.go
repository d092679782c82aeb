package broker

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms the broker accepts, as Kafka names them.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// ACL is one access rule of a User: which operation on which resource it
// allows (or, with Allow false, denies), from any host. See
// kmsg.ACLResourceType, kmsg.ACLResourcePatternType and kmsg.ACLOperation
// for the values; the Principal field is ignored (it is the user's).
type ACL = kfake.ACL

// User is a SASL user of the broker.
type User struct {
	// Mechanism is MechanismPlain, MechanismSCRAMSHA256 or
	// MechanismSCRAMSHA512. A name with several mechanisms needs one User
	// per mechanism.
	Mechanism string
	Name      string
	Password  string
	// Superuser users pass every ACL check.
	Superuser bool
	// ACLs are what the user may do when Config.EnableACLs is set.
	ACLs []ACL
}

// internalUser is the superuser the broker's own clients authenticate as
// (the group guard's heartbeats and the log start keeper's topic listing):
// under ACLs they must see every group and topic.
const internalUser = "eddy-broker-internal"

// validateSecurity checks the TLS, SASL and ACL settings.
func (c Config) validateSecurity() error {
	var errs []error
	seen := make(map[[2]string]bool)
	for _, u := range c.Users {
		switch u.Mechanism {
		case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		default:
			errs = append(errs, fmt.Errorf("user %q: unknown SASL mechanism %q (want %s, %s or %s)",
				u.Name, u.Mechanism, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512))
		}
		if u.Name == "" {
			errs = append(errs, errors.New("a user has no name"))
		}
		if u.Name == internalUser {
			errs = append(errs, fmt.Errorf("user name %q is reserved for the broker's own clients", u.Name))
		}
		k := [2]string{u.Mechanism, u.Name}
		if seen[k] {
			errs = append(errs, fmt.Errorf("user %q is given twice for %s", u.Name, u.Mechanism))
		}
		seen[k] = true
	}
	if c.EnableACLs && len(c.Users) == 0 {
		errs = append(errs, errors.New("EnableACLs needs SASL users: without them every client is the same anonymous principal"))
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		errs = append(errs, errors.New("TLS config has no certificate"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}

// securityOpts returns the kfake options for c's SASL and ACLs, and the
// options by which the broker's own clients connect: as the internal
// superuser, over TLS when the listener speaks it (see secureListener).
func (c Config) securityOpts() (cluster []kfake.Opt, internal []kgo.Opt, err error) {
	if c.TLS != nil {
		internal = append(internal, kgo.DialTLSConfig(internalTLS(c.TLS)))
	}
	if len(c.Users) == 0 {
		return cluster, internal, nil
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, err
	}
	pass := hex.EncodeToString(secret)
	cluster = append(cluster, kfake.EnableSASL(), kfake.Superuser(MechanismSCRAMSHA512, internalUser, pass))
	internal = append(internal, kgo.SASL(scram.Auth{User: internalUser, Pass: pass}.AsSha512Mechanism()))
	for _, u := range c.Users {
		if u.Superuser {
			cluster = append(cluster, kfake.Superuser(u.Mechanism, u.Name, u.Password))
		} else {
			cluster = append(cluster, kfake.User(u.Mechanism, u.Name, u.Password, u.ACLs...))
		}
	}
	if c.EnableACLs {
		cluster = append(cluster, kfake.EnableACLs())
	}
	return cluster, internal, nil
}

// secureListener wraps the listener kfake accepts clients on: TLS when
// configured, and below it, with SASL on, the adapter that lets every
// client authenticate as on Kafka (see saslListener). kfake's own TLS
// option would put TLS between the adapter and kfake, where the adapter
// could not read the requests.
func (c Config) secureListener(l net.Listener) net.Listener {
	if c.TLS != nil {
		l = tls.NewListener(l, c.TLS)
	}
	if len(c.Users) > 0 {
		l = newSASLListener(l, cmp.Or(c.Logger, slog.New(slog.DiscardHandler)))
	}
	return l
}

// kfakeSASLFile is where kfake keeps its SASL users in a DataDir.
const kfakeSASLFile = "sasl.json"

// forgetKeptUsers removes the SASL users kfake kept in the DataDir: on a
// restart it would load them in place of the configured ones, so that the
// broker's own clients (whose password is new at each start) could not
// log in, nor a user whose password changed, nor a new user. The
// configured users are the broker's.
func (c Config) forgetKeptUsers() error {
	if c.DataDir == "" || len(c.Users) == 0 {
		return nil
	}
	if err := os.Remove(filepath.Join(c.DataDir, kfakeSASLFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// resetACLs makes the ACLs of a broker restarted on its DataDir, which kfake
// reloads from there (and then ignores the configured ones), those of c's
// users, through the broker's own client options.
func (c Config) resetACLs(internal []kgo.Opt) error {
	cl, err := kgo.NewClient(internal...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	del := kmsg.NewPtrDeleteACLsRequest()
	all := kmsg.NewDeleteACLsRequestFilter()
	all.ResourceType, all.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	all.Operation, all.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	del.Filters = append(del.Filters, all)
	deleted, err := del.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, r := range deleted.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}

	create := kmsg.NewPtrCreateACLsRequest()
	for _, u := range c.Users {
		for _, a := range u.ACLs {
			cr := kmsg.NewCreateACLsRequestCreation()
			cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = a.Resource, a.Name, a.Pattern
			cr.Principal, cr.Host, cr.Operation = "User:"+u.Name, cmp.Or(a.Host, "*"), a.Operation
			cr.PermissionType = kmsg.ACLPermissionTypeDeny
			if a.Allow {
				cr.PermissionType = kmsg.ACLPermissionTypeAllow
			}
			create.Creations = append(create.Creations, cr)
		}
	}
	if len(create.Creations) == 0 {
		return nil
	}
	created, err := create.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, r := range created.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("create: %w", err)
		}
	}
	return nil
}

// internalTLS is the client side of the broker's own TLS connections to
// itself. It trusts exactly the certificates the listener serves (pinned,
// since the broker may be reached at an address its certificate does not
// name), and offers them as its own in case the listener asks clients for
// one.
func internalTLS(server *tls.Config) *tls.Config {
	var pinned [][]byte
	for _, c := range server.Certificates {
		if len(c.Certificate) > 0 {
			pinned = append(pinned, c.Certificate[0])
		}
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: server.Certificates,
		// Verification is VerifyConnection's pin below; with a
		// GetCertificate-only config there is nothing to pin and the
		// broker trusts its own loopback connection.
		InsecureSkipVerify: true, //nolint:gosec // pinned below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(pinned) == 0 {
				return nil
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("broker: own listener sent no certificate")
			}
			for _, p := range pinned {
				if bytes.Equal(p, cs.PeerCertificates[0].Raw) {
					return nil
				}
			}
			return errors.New("broker: own listener sent a certificate it was not configured with")
		},
	}
}

// ClientMechanism returns the franz-go SASL mechanism that authenticates as
// the given user with the given Kafka mechanism name, for kgo.SASL or
// runtime.Config.SASL.
func ClientMechanism(mechanism, user, password string) (sasl.Mechanism, error) {
	switch mechanism {
	case MechanismPlain:
		return plain.Auth{User: user, Pass: password}.AsMechanism(), nil
	case MechanismSCRAMSHA256:
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism(), nil
	case MechanismSCRAMSHA512:
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown SASL mechanism %q (want %s, %s or %s)", mechanism, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
}

// Certs is a throwaway certificate authority with a server and a client
// certificate it signed, PEM-encoded, for tests and the demo. Never use
// it where security matters: the keys live in memory and in whatever
// directory WriteFiles is given.
type Certs struct {
	CA                    []byte // the CA certificate
	ServerCert, ServerKey []byte
	ClientCert, ClientKey []byte
}

// Cert file names WriteFiles uses.
const (
	CAFile         = "ca.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
	ClientCertFile = "client.pem"
	ClientKeyFile  = "client-key.pem"
)

// GenerateCerts makes a new CA, valid for a day, and a server
// certificate for hosts (DNS names or IP addresses; default localhost,
// 127.0.0.1 and ::1) and a client certificate signed by it. The server
// certificate is good for client authentication too, so that the broker's
// own clients can present it under mutual TLS.
func GenerateCerts(hosts ...string) (*Certs, error) {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "eddy test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, hosts []string) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
	}
	c := &Certs{CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	if c.ServerCert, c.ServerKey, err = leaf("eddy test broker", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts); err != nil {
		return nil, err
	}
	if c.ClientCert, c.ClientKey, err = leaf("eddy test client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil); err != nil {
		return nil, err
	}
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

// ServerTLS is a listener configuration serving the server certificate.
// With requireClientCert, clients must present a certificate the CA
// signed (mutual TLS).
func (c *Certs) ServerTLS(requireClientCert bool) (*tls.Config, error) {
	kp, err := tls.X509KeyPair(c.ServerCert, c.ServerKey)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = c.pool()
	}
	return cfg, nil
}

// ClientTLS is a client configuration trusting the CA, presenting the
// client certificate when withClientCert is set.
func (c *Certs) ClientTLS(withClientCert bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.pool()}
	if withClientCert {
		kp, err := tls.X509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

func (c *Certs) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(c.CA)
	return p
}

// WriteFiles writes the certificates and keys into dir (created if need
// be) under the *File names, keys readable by the owner only.
func (c *Certs) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CAFile, c.CA, 0o644},
		{ServerCertFile, c.ServerCert, 0o644},
		{ServerKeyFile, c.ServerKey, 0o600},
		{ClientCertFile, c.ClientCert, 0o644},
		{ClientKeyFile, c.ClientKey, 0o600},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// ReadCerts reads certificates written by WriteFiles.
func ReadCerts(dir string) (*Certs, error) {
	c := &Certs{}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{
		{CAFile, &c.CA},
		{ServerCertFile, &c.ServerCert},
		{ServerKeyFile, &c.ServerKey},
		{ClientCertFile, &c.ClientCert},
		{ClientKeyFile, &c.ClientKey},
	} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return nil, err
		}
		*f.dst = b
	}
	return c, nil
}
