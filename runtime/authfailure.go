package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sasl"
)

// AuthFailure returns err explained when it is a SASL authentication
// failure (kerr.SaslAuthenticationFailed, which errors.Is still finds):
// that authentication failed, for which mechanism and user, and what to
// check. Such a failure is final, unlike an unreachable broker. Other
// errors, and nil, are returned as they are. m is the mechanism the client
// authenticated with; nil when it came some other way (kgo.SASL in
// Config.ClientOptions).
func AuthFailure(err error, brokers []string, m sasl.Mechanism) error {
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		return err
	}
	if m == nil {
		return fmt.Errorf("authentication failed: brokers %v refused the client's SASL login; check its user, password and mechanism against the brokers' SASL users: %w", brokers, err)
	}
	who := "its user"
	if u := saslUser(m); u != "" {
		who = fmt.Sprintf("user %q", u)
	}
	return fmt.Errorf("authentication failed: brokers %v refused %s as %s; check that the brokers have this user for %s and that its password is right: %w",
		brokers, m.Name(), who, m.Name(), err)
}

// saslUser returns the user m logs in as, read from its first message, for
// the mechanisms whose first message names the user and has no side
// effects to make (PLAIN and SCRAM); else "".
func saslUser(m sasl.Mechanism) string {
	name := m.Name()
	if name != "PLAIN" && !strings.HasPrefix(name, "SCRAM-") {
		return ""
	}
	_, first, err := m.Authenticate(context.Background(), "")
	if err != nil {
		return ""
	}
	if name == "PLAIN" { // authzid NUL user NUL password
		if parts := bytes.SplitN(first, []byte{0}, 3); len(parts) == 3 {
			return string(parts[1])
		}
		return ""
	}
	// SCRAM client-first: gs2 header, then "n=user,r=nonce" (RFC 5802),
	// with ',' and '=' in the user escaped as =2C and =3D.
	_, bare, ok := strings.Cut(string(first), ",,")
	if !ok {
		return ""
	}
	for attr := range strings.SplitSeq(bare, ",") {
		if u, ok := strings.CutPrefix(attr, "n="); ok {
			return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(u)
		}
	}
	return ""
}
