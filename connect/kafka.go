package connect

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms a KafkaConfig accepts, as spelled in
// KafkaConfig.SASLMechanism (case does not matter).
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// KafkaConfig says how keyhook's Kafka clients reach the brokers. The zero
// value is a plaintext connection without authentication.
type KafkaConfig struct {
	// TLS dials the brokers over TLS, verified against the system roots
	// unless TLSCAFile is set. Every other TLS field requires it.
	TLS bool
	// TLSCAFile is a PEM file of the certificate authorities that sign the
	// brokers' certificates; it replaces the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the PEM client certificate and its key,
	// for brokers that authenticate clients by certificate (mutual TLS).
	// Both or neither.
	TLSCertFile string
	TLSKeyFile  string
	// TLSServerName is the name verified in every broker's certificate.
	// Default: the host of the address being dialed, which is right unless
	// the brokers advertise addresses their certificates do not name.
	TLSServerName string
	// TLSInsecureSkipVerify accepts any broker certificate. It exists for
	// test clusters only; it is never implied by another field.
	TLSInsecureSkipVerify bool
	// SASLMechanism is SASLPlain, SASLScramSHA256 or SASLScramSHA512; empty
	// means no SASL. PLAIN sends the password as is, so pair it with TLS
	// outside a trusted network.
	SASLMechanism string
	// SASLUsername is the SASL user. Required with a mechanism.
	SASLUsername string
	// SASLPassword is the SASL password. Exactly one of SASLPassword and
	// SASLPasswordFile is required with a mechanism.
	SASLPassword string
	// SASLPasswordFile is a file holding the SASL password (trailing line
	// breaks are ignored), such as a mounted Kubernetes Secret. It is read
	// again at every authentication, so a rotated Secret is used by new
	// connections without a restart.
	SASLPasswordFile string
}

// Validate reports the first inconsistent field of c without touching any
// file. The error is a *FieldError.
func (c KafkaConfig) Validate() error {
	if !c.TLS {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"TLSCAFile", c.TLSCAFile != ""},
			{"TLSCertFile", c.TLSCertFile != ""},
			{"TLSKeyFile", c.TLSKeyFile != ""},
			{"TLSServerName", c.TLSServerName != ""},
			{"TLSInsecureSkipVerify", c.TLSInsecureSkipVerify},
		} {
			if f.set {
				return fieldErr(f.name, "requires TLS to be enabled")
			}
		}
	}
	if c.TLSInsecureSkipVerify && c.TLSCAFile != "" {
		return fieldErr("TLSInsecureSkipVerify", "contradicts the CA file: with verification off the CA would never be used")
	}
	if err := c.tlsFiles().check(); err != nil {
		return err
	}
	mech := strings.ToLower(c.SASLMechanism)
	switch mech {
	case "":
		switch {
		case c.SASLUsername != "":
			return fieldErr("SASLUsername", "is set without a SASL mechanism")
		case c.SASLPassword != "":
			return fieldErr("SASLPassword", "is set without a SASL mechanism")
		case c.SASLPasswordFile != "":
			return fieldErr("SASLPasswordFile", "is set without a SASL mechanism")
		}
		return nil
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		return fieldErr("SASLMechanism", "is %q, want %s, %s or %s", c.SASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	switch {
	case c.SASLUsername == "":
		return fieldErr("SASLUsername", "is required with SASL mechanism %s", mech)
	case c.SASLPassword != "" && c.SASLPasswordFile != "":
		return fieldErr("SASLPasswordFile", "is set together with a password; give one of the two")
	case c.SASLPassword == "" && c.SASLPasswordFile == "":
		return fieldErr("SASLPassword", "(or a password file) is required with SASL mechanism %s", mech)
	}
	return nil
}

func (c KafkaConfig) tlsFiles() tlsFiles {
	return tlsFiles{
		caFile: c.TLSCAFile, certFile: c.TLSCertFile, keyFile: c.TLSKeyFile,
		caField: "TLSCAFile", certField: "TLSCertFile", keyField: "TLSKeyFile",
	}
}

// KafkaOptions returns the kgo options that make a client connect as c
// says: nothing for the zero value, kgo.DialTLSConfig for TLS, kgo.SASL
// for a mechanism. Give them to every client that talks to the brokers.
// It validates c, loads the TLS files and reads the password file once, so
// that a missing or malformed file stops the start rather than the first
// connection; errors are *FieldError.
func KafkaOptions(c KafkaConfig) ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if c.TLS {
		cfg := &tls.Config{
			MinVersion: tls.VersionTLS12,
			ServerName: c.TLSServerName,
			// Only ever on the operator's explicit request; Validate
			// refuses it next to a CA, which would suggest verification.
			InsecureSkipVerify: c.TLSInsecureSkipVerify,
		}
		if err := c.tlsFiles().apply(cfg); err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if c.SASLMechanism == "" {
		return opts, nil
	}
	if _, err := c.password(); err != nil {
		return nil, err
	}
	mech, err := c.mechanism()
	if err != nil {
		return nil, err
	}
	return append(opts, kgo.SASL(mech)), nil
}

// password returns SASLPassword, or the content of SASLPasswordFile without
// its trailing line breaks.
func (c KafkaConfig) password() (string, error) {
	if c.SASLPasswordFile == "" {
		return c.SASLPassword, nil
	}
	b, err := os.ReadFile(c.SASLPasswordFile)
	if err != nil {
		return "", fieldWrap("SASLPasswordFile", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", fieldWrap("SASLPasswordFile", fmt.Errorf("%s is empty", c.SASLPasswordFile))
	}
	return p, nil
}

// mechanism returns the SASL mechanism of a validated c. The password is
// fetched at every authentication, which is what lets a rotated password
// file take effect on the next connection.
func (c KafkaConfig) mechanism() (sasl.Mechanism, error) {
	user := c.SASLUsername
	switch strings.ToLower(c.SASLMechanism) {
	case SASLPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := c.password()
			return plain.Auth{User: user, Pass: p}, err
		}), nil
	case SASLScramSHA256:
		return scram.Sha256(func(context.Context) (scram.Auth, error) {
			p, err := c.password()
			return scram.Auth{User: user, Pass: p}, err
		}), nil
	case SASLScramSHA512:
		return scram.Sha512(func(context.Context) (scram.Auth, error) {
			p, err := c.password()
			return scram.Auth{User: user, Pass: p}, err
		}), nil
	default:
		return nil, fieldErr("SASLMechanism", "is %q, want %s, %s or %s", c.SASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
}
