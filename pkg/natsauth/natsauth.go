// Package natsauth holds how every sluice binary and the CLI authenticate to
// NATS and encrypt the connection: a credentials file (user JWT and nkey
// seed, as `sluice creds issue` writes), a bare nkey seed, or a user and
// password, and TLS (a CA to trust, a client certificate, a server name).
// The same options come from flags (Register), the environment (their
// defaults) and the agent's config file. Options checks every file it is
// given before connecting, so a missing or unreadable credential is a
// startup error naming the flag and the file, not a connection refused.
package natsauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// Environment variables that set the flags' defaults.
const (
	EnvCreds         = "SLUICE_NATS_CREDS"         // --creds
	EnvNKey          = "SLUICE_NATS_NKEY"          // --nkey
	EnvUser          = "SLUICE_NATS_USER"          // --nats-user
	EnvPasswordFile  = "SLUICE_NATS_PASSWORD_FILE" // --nats-password-file
	EnvTLSCA         = "SLUICE_NATS_TLS_CA"        // --tls-ca
	EnvTLSCert       = "SLUICE_NATS_TLS_CERT"      // --tls-cert
	EnvTLSKey        = "SLUICE_NATS_TLS_KEY"       // --tls-key
	EnvTLSServerName = "SLUICE_NATS_TLS_SERVER"    // --tls-server-name
)

// Options are the connection's credentials and TLS settings; the zero value
// connects without either.
type Options struct {
	// Creds is a credentials file: a user JWT and its nkey seed.
	Creds string `json:"creds,omitempty"`
	// NKey is a file holding a user nkey seed (SU…).
	NKey string `json:"nkey,omitempty"`
	// User and PasswordFile: the simple case, a user and a file holding its
	// password (never the password itself on a command line).
	User         string `json:"user,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	// TLS: the CA that signed the servers' certificates, this client's
	// certificate and key (when the servers verify clients), and the name
	// the servers' certificates carry when it differs from the URL's host.
	TLSCA         string `json:"tlsCA,omitempty"`
	TLSCert       string `json:"tlsCert,omitempty"`
	TLSKey        string `json:"tlsKey,omitempty"`
	TLSServerName string `json:"tlsServerName,omitempty"`
}

// FlagSet is what Register needs of a flag set: both the standard
// library's flag.FlagSet and cobra's pflag.FlagSet have it.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
}

// Register adds --creds, --nkey, --nats-user, --nats-password-file, --tls-ca,
// --tls-cert, --tls-key and --tls-server-name to fs, each defaulting to its
// environment variable.
func (o *Options) Register(fs FlagSet) {
	fs.StringVar(&o.Creds, "creds", os.Getenv(EnvCreds), "NATS credentials file (user JWT and nkey seed, from 'sluice creds issue') (env "+EnvCreds+")")
	fs.StringVar(&o.NKey, "nkey", os.Getenv(EnvNKey), "file holding a NATS user nkey seed (env "+EnvNKey+")")
	fs.StringVar(&o.User, "nats-user", os.Getenv(EnvUser), "NATS user, with --nats-password-file (env "+EnvUser+")")
	fs.StringVar(&o.PasswordFile, "nats-password-file", os.Getenv(EnvPasswordFile), "file holding the NATS user's password (env "+EnvPasswordFile+")")
	fs.StringVar(&o.TLSCA, "tls-ca", os.Getenv(EnvTLSCA), "PEM file of the CA that signed the NATS servers' certificates; turns TLS on (env "+EnvTLSCA+")")
	fs.StringVar(&o.TLSCert, "tls-cert", os.Getenv(EnvTLSCert), "PEM client certificate, when the NATS servers verify clients (env "+EnvTLSCert+")")
	fs.StringVar(&o.TLSKey, "tls-key", os.Getenv(EnvTLSKey), "PEM key of --tls-cert (env "+EnvTLSKey+")")
	fs.StringVar(&o.TLSServerName, "tls-server-name", os.Getenv(EnvTLSServerName), "name the NATS servers' certificates carry, when not the URL's host (env "+EnvTLSServerName+")")
}

// Merge returns o with every empty field taken from def: flags over a
// config file's values.
func (o Options) Merge(def Options) Options {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return Options{
		Creds: pick(o.Creds, def.Creds), NKey: pick(o.NKey, def.NKey),
		User: pick(o.User, def.User), PasswordFile: pick(o.PasswordFile, def.PasswordFile),
		TLSCA: pick(o.TLSCA, def.TLSCA), TLSCert: pick(o.TLSCert, def.TLSCert),
		TLSKey: pick(o.TLSKey, def.TLSKey), TLSServerName: pick(o.TLSServerName, def.TLSServerName),
	}
}

// Describe says how the connection authenticates, for a start-up log line:
// "creds /etc/sluice/node.creds (user node-01)", "no credentials".
func (o Options) Describe() string {
	var parts []string
	switch {
	case o.Creds != "":
		p := "creds " + o.Creds
		if name := credsName(o.Creds); name != "" {
			p += " (user " + name + ")"
		}
		parts = append(parts, p)
	case o.NKey != "":
		parts = append(parts, "nkey "+o.NKey)
	case o.User != "":
		parts = append(parts, "user "+o.User)
	default:
		parts = append(parts, "no credentials")
	}
	if o.TLSCA != "" || o.TLSCert != "" {
		parts = append(parts, "TLS")
	}
	return strings.Join(parts, ", ")
}

// NATS checks every file named and returns the nats.Options that connect
// with them. Errors name the flag and the file.
func (o Options) NATS() ([]nats.Option, error) {
	var opts []nats.Option
	var errs []error
	set := 0
	for _, v := range []string{o.Creds, o.NKey, o.User} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		errs = append(errs, errors.New("--creds, --nkey and --nats-user are alternatives: give one"))
	}
	switch {
	case o.Creds != "":
		if err := checkCreds(o.Creds); err != nil {
			errs = append(errs, fmt.Errorf("--creds %s: %w", o.Creds, err))
		} else {
			opts = append(opts, nats.UserCredentials(o.Creds))
		}
	case o.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("--nkey %s: %w", o.NKey, readable(o.NKey, err)))
		} else {
			opts = append(opts, opt)
		}
	case o.User != "":
		if o.PasswordFile == "" {
			errs = append(errs, fmt.Errorf("--nats-user %s needs --nats-password-file", o.User))
			break
		}
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--nats-password-file: %w", err))
			break
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			errs = append(errs, fmt.Errorf("--nats-password-file %s: the file is empty", o.PasswordFile))
			break
		}
		opts = append(opts, nats.UserInfo(o.User, pw))
	case o.PasswordFile != "":
		errs = append(errs, errors.New("--nats-password-file needs --nats-user"))
	}
	if t, err := o.tlsConfig(); err != nil {
		errs = append(errs, err)
	} else if t != nil {
		opts = append(opts, nats.Secure(t))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

// tlsConfig is the client TLS config, nil when no TLS option is set.
func (o Options) tlsConfig() (*tls.Config, error) {
	if o.TLSCA == "" && o.TLSCert == "" && o.TLSKey == "" && o.TLSServerName == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.TLSServerName}
	var errs []error
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-ca: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("--tls-ca %s: no PEM certificate in it", o.TLSCA))
			}
			t.RootCAs = pool
		}
	}
	switch {
	case (o.TLSCert == "") != (o.TLSKey == ""):
		errs = append(errs, errors.New("--tls-cert and --tls-key go together: give both or neither"))
	case o.TLSCert != "":
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", o.TLSCert, o.TLSKey, err))
		} else {
			t.Certificates = []tls.Certificate{cert}
		}
	}
	return t, errors.Join(errs...)
}

// checkCreds reads a credentials file the way nats.go will and says what
// is wrong with it.
func checkCreds(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return readable(path, err)
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err == nil {
		_, err = jwt.DecodeUserClaims(tok)
	}
	if err != nil {
		return fmt.Errorf("no user JWT in it (want the file `sluice creds issue` wrote): %w", err)
	}
	kp, err := jwt.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("no nkey seed in it: %w", err)
	}
	if _, err := kp.Seed(); err != nil {
		return fmt.Errorf("its nkey has no seed: %w", err)
	}
	return nil
}

// credsName is the name in the user JWT of a credentials file, "" when it
// cannot be read.
func credsName(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return ""
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return ""
	}
	return uc.Name
}

// readable turns a file error into one that says whether the file is
// missing or unreadable.
func readable(path string, err error) error {
	if _, serr := os.Stat(path); serr != nil {
		return serr
	}
	return err
}

// IsPermissionViolation reports whether err, as a connection's error
// handler gets it, is the server refusing a publish or subscription.
func IsPermissionViolation(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(err.Error(), "Permissions Violation")
}

// ConnectHint says what to try when connecting failed with err: the flags
// and variables of credentials when the server refused them, those of TLS
// when its certificate could not be verified; "" for other errors.
func ConnectHint(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return "the server did not accept these credentials: pass a credentials file with --creds (env " + EnvCreds +
			"), issued by 'sluice creds issue ROLE' (docs/security.md)"
	case errors.As(err, &unknownCA), errors.As(err, &verify), strings.Contains(err.Error(), "x509:"):
		return "the server's TLS certificate could not be verified: pass the CA that signed it with --tls-ca (env " + EnvTLSCA +
			"), and --tls-server-name (env " + EnvTLSServerName + ") when the certificate names another host (docs/security.md)"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "the server requires TLS: pass the CA that signed its certificate with --tls-ca (env " + EnvTLSCA + ")"
	}
	return ""
}
