// Package creds is sluice's identity and permissions, on NATS's own
// decentralized authentication (nats-io/jwt/v2 and nkeys): an operator, a
// system account (for the server's resolver and for pushing account
// updates), and the sluice account with one scoped signing key per role
// (roles.go). `sluice creds init` makes them in a directory, `sluice creds
// issue` issues a user, `sluice creds revoke` revokes one and pushes the
// updated account to the servers, which disconnect it at once.
//
// The directory (keep it off the nodes: it holds the operator's seed):
//
//	operator.nk, operator.jwt   the operator
//	system.nk,  system.jwt      the system account; system.creds: a user of it
//	account.nk, account.jwt     the sluice account (its JWT carries the roles)
//	signing/<role>.nk           each role's scoped signing key
//	server.conf                 for nats-server: include it (operator, resolver, preload)
//	users.json                  every user issued: name, role, node, key, revoked
//	users/<name>.creds          the issued users' credentials
package creds

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sluicehq/sluice/pkg/contract"
)

// AccountName is the name of the account every sluice user is in.
const AccountName = "SLUICE"

// Setup is a loaded credentials directory.
type Setup struct {
	Dir      string
	operator nkeys.KeyPair
	system   nkeys.KeyPair
	account  nkeys.KeyPair
	signers  map[string]nkeys.KeyPair // by role
	// Operator, System and Account are the current JWTs.
	Operator, System, Account string
	Users                     []User
}

// User is one issued user, as users.json lists it.
type User struct {
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	Node      string    `json:"node,omitempty"`
	PublicKey string    `json:"public_key"`
	IssuedAt  time.Time `json:"issued_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Creds     string    `json:"creds"` // file, relative to the directory
}

// InitOptions say how the directory's server.conf is written.
type InitOptions struct {
	// ResolverDir is where nats-server keeps account JWTs (resolver type
	// full); default /data/jwt, next to the images' JetStream store.
	ResolverDir string
}

// Init makes a new operator, system account and sluice account with a
// signing key per role in dir, which must not hold one already.
func Init(dir string, o InitOptions) (*Setup, error) {
	if o.ResolverDir == "" {
		o.ResolverDir = "/data/jwt"
	}
	if _, err := os.Stat(filepath.Join(dir, "operator.nk")); err == nil {
		return nil, fmt.Errorf("%s already holds an operator (operator.nk): refusing to replace it; issue users from it, or choose another directory", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "signing"), 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "users"), 0o700); err != nil {
		return nil, err
	}
	s := &Setup{Dir: dir, signers: map[string]nkeys.KeyPair{}}
	var err error
	if s.operator, err = nkeys.CreateOperator(); err != nil {
		return nil, err
	}
	if s.system, err = nkeys.CreateAccount(); err != nil {
		return nil, err
	}
	if s.account, err = nkeys.CreateAccount(); err != nil {
		return nil, err
	}
	for _, role := range Roles {
		if s.signers[role], err = nkeys.CreateAccount(); err != nil {
			return nil, err
		}
	}
	opub, _ := s.operator.PublicKey()
	spub, _ := s.system.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "sluice"
	oc.SystemAccount = spub
	if s.Operator, err = oc.Encode(s.operator); err != nil {
		return nil, fmt.Errorf("operator JWT: %w", err)
	}
	sc := jwt.NewAccountClaims(spub)
	sc.Name = "SYS"
	if s.System, err = sc.Encode(s.operator); err != nil {
		return nil, fmt.Errorf("system account JWT: %w", err)
	}
	ac, err := s.accountClaims()
	if err != nil {
		return nil, err
	}
	if err := s.signAccount(ac); err != nil {
		return nil, err
	}
	if err := s.writeKeys(); err != nil {
		return nil, err
	}
	// A user of the system account, to push account updates (revocations).
	sysUser, err := s.newUser("system", "", "", s.system, false)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "system.creds"), sysUser, 0o600); err != nil {
		return nil, err
	}
	return s, s.save(o.ResolverDir)
}

// accountClaims are the sluice account's claims: JetStream on without
// limits, and a scoped signing key per role.
func (s *Setup) accountClaims() (*jwt.AccountClaims, error) {
	apub, _ := s.account.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxAckPending: jwt.NoLimit, MemoryMaxStreamBytes: jwt.NoLimit,
		DiskMaxStreamBytes: jwt.NoLimit}
	for _, role := range Roles {
		perm, err := permissions(role)
		if err != nil {
			return nil, err
		}
		pub, _ := s.signers[role].PublicKey()
		scope := jwt.NewUserScope()
		scope.Key, scope.Role, scope.Description = pub, role, "sluice "+role+" users"
		scope.Template.Permissions = perm
		ac.SigningKeys.AddScopedSigner(scope)
	}
	return ac, nil
}

// signAccount signs ac with the operator and keeps it as s.Account, with
// the revocations of every revoked user.
func (s *Setup) signAccount(ac *jwt.AccountClaims) error {
	for _, u := range s.Users {
		if !u.RevokedAt.IsZero() {
			ac.RevokeAt(u.PublicKey, u.RevokedAt)
		}
	}
	tok, err := ac.Encode(s.operator)
	if err != nil {
		return fmt.Errorf("account JWT: %w", err)
	}
	s.Account = tok
	return nil
}

// Load reads a directory Init made.
func Load(dir string) (*Setup, error) {
	s := &Setup{Dir: dir, signers: map[string]nkeys.KeyPair{}}
	seed := func(name string) (nkeys.KeyPair, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s: no %s: is this a directory `sluice creds init` made?", dir, name)
			}
			return nil, err
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		return kp, nil
	}
	var err error
	if s.operator, err = seed("operator.nk"); err != nil {
		return nil, err
	}
	if s.system, err = seed("system.nk"); err != nil {
		return nil, err
	}
	if s.account, err = seed("account.nk"); err != nil {
		return nil, err
	}
	for _, role := range Roles {
		if s.signers[role], err = seed(filepath.Join("signing", role+".nk")); err != nil {
			return nil, err
		}
	}
	for name, dst := range map[string]*string{"operator.jwt": &s.Operator, "system.jwt": &s.System, "account.jwt": &s.Account} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		*dst = strings.TrimSpace(string(b))
	}
	b, err := os.ReadFile(filepath.Join(dir, "users.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &s.Users); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "users.json"), err)
	}
	return s, nil
}

// Issue issues a user of role (for RoleNode, of node) and writes its
// credentials to users/<name>.creds; it returns the file's path. The name
// is the node's for a node, else the role's, with a suffix when taken.
func (s *Setup) Issue(role, node string) (string, error) {
	if err := ValidRole(role); err != nil {
		return "", err
	}
	switch {
	case role == RoleNode && node == "":
		return "", errors.New("--node: a node user is issued for one node: name it")
	case role == RoleNode:
		if err := contract.ValidNodeName(node); err != nil {
			return "", fmt.Errorf("--node: %w", err)
		}
	case node != "":
		return "", fmt.Errorf("--node is for role %s only", RoleNode)
	}
	name := role
	if role == RoleNode {
		name = node
	}
	base := name
	for i := 2; slices.ContainsFunc(s.Users, func(u User) bool { return u.Name == name }); i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	b, err := s.newUser(name, role, node, s.signers[role], true)
	if err != nil {
		return "", err
	}
	uc, _ := userClaims(b)
	rel := filepath.Join("users", name+".creds")
	if err := os.WriteFile(filepath.Join(s.Dir, rel), b, 0o600); err != nil {
		return "", err
	}
	s.Users = append(s.Users, User{Name: name, Role: role, Node: node, PublicKey: uc.Subject,
		IssuedAt: time.Unix(uc.IssuedAt, 0).UTC(), Creds: rel})
	return filepath.Join(s.Dir, rel), s.saveUsers()
}

// UserFile is the credentials file of a user of role (and node, for a
// node) issued from this setup and not revoked, issuing one the first
// time: for `sluice dev --secure` and tests, which want one user per
// component.
func (s *Setup) UserFile(role, node string) (string, error) {
	for _, u := range s.Users {
		if u.Role == role && u.Node == node && u.RevokedAt.IsZero() {
			return filepath.Join(s.Dir, u.Creds), nil
		}
	}
	return s.Issue(role, node)
}

// newUser makes a user signed by signer: scoped (its permissions are the
// signer's template) for the sluice account, plain for the system account.
func (s *Setup) newUser(name, role, node string, signer nkeys.KeyPair, scoped bool) ([]byte, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	if scoped {
		apub, _ := s.account.PublicKey()
		uc.IssuerAccount = apub
		uc.SetScoped(true)
		uc.Tags.Add("role:" + role)
		if node != "" {
			uc.Tags.Add(tagNode+":"+node, tagInbox+":"+inboxToken(node))
		}
	}
	tok, err := uc.Encode(signer)
	if err != nil {
		return nil, fmt.Errorf("user JWT: %w", err)
	}
	return jwt.FormatUserConfig(tok, useed)
}

func userClaims(creds []byte) (*jwt.UserClaims, error) {
	tok, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return nil, err
	}
	return jwt.DecodeUserClaims(tok)
}

// Revoke revokes every user issued under name (a node's name, or a user's
// name) that is not revoked yet, and re-signs the account with the
// revocations. Push the account (Push) for running servers to apply it.
func (s *Setup) Revoke(name string) ([]User, error) {
	var revoked []User
	now := time.Now().UTC().Truncate(time.Second)
	for i, u := range s.Users {
		if (u.Name == name || u.Node == name) && u.RevokedAt.IsZero() {
			// A JWT is revoked when issued at or before the revocation
			// time, in whole seconds.
			s.Users[i].RevokedAt = now
			if u.IssuedAt.After(now) {
				s.Users[i].RevokedAt = u.IssuedAt
			}
			revoked = append(revoked, s.Users[i])
		}
	}
	if len(revoked) == 0 {
		return nil, fmt.Errorf("no user or node %q among the users issued from %s that is not revoked already (see `sluice creds list`)", name, s.Dir)
	}
	if err := s.Resign(); err != nil {
		return nil, err
	}
	return revoked, s.saveUsers()
}

// Resign signs the account again with this version's role permissions and
// the revocations, and writes it: after an upgrade that changes what a
// role may do, `sluice creds push` re-signs and pushes it. The preload in
// server.conf keeps the older JWT; the servers keep the newer one pushed.
func (s *Setup) Resign() error {
	ac, err := s.accountClaims()
	if err != nil {
		return err
	}
	if err := s.signAccount(ac); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, "account.jwt"), []byte(s.Account+"\n"), 0o600)
}

// AccountPublicKey is the sluice account's public key.
func (s *Setup) AccountPublicKey() string { p, _ := s.account.PublicKey(); return p }

// SystemPublicKey is the system account's public key.
func (s *Setup) SystemPublicKey() string { p, _ := s.system.PublicKey(); return p }

func (s *Setup) writeKeys() error {
	seed := func(kp nkeys.KeyPair) []byte { b, _ := kp.Seed(); return append(b, '\n') }
	files := map[string][]byte{
		"operator.nk": seed(s.operator), "system.nk": seed(s.system), "account.nk": seed(s.account),
		"operator.jwt": []byte(s.Operator + "\n"), "system.jwt": []byte(s.System + "\n"), "account.jwt": []byte(s.Account + "\n"),
	}
	for role, kp := range s.signers {
		files[filepath.Join("signing", role+".nk")] = seed(kp)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (s *Setup) saveUsers() error {
	if s.Users == nil {
		s.Users = []User{}
	}
	b, err := json.MarshalIndent(s.Users, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, "users.json"), append(b, '\n'), 0o600)
}

func (s *Setup) save(resolverDir string) error {
	if err := s.saveUsers(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, "server.conf"), []byte(s.ServerConf(resolverDir)), 0o644)
}

// ServerConf is the nats-server configuration of this setup: the operator,
// the system account, a full resolver keeping account JWTs in resolverDir
// (updates pushed by `sluice creds revoke` are stored there and survive
// restarts), and both accounts preloaded.
func (s *Setup) ServerConf(resolverDir string) string {
	return fmt.Sprintf(`# nats-server authentication for sluice, written by `+"`sluice creds init`"+`.
# Include it from the server's config. It holds public JWTs only; the seeds
# stay in the directory it came from.
operator: %s
system_account: %s
resolver: {
  type: full
  dir: %q
  allow_delete: false
  # How often servers compare accounts with their peers: a server that was
  # down while a revocation was pushed applies it within this of being back.
  interval: "30s"
}
resolver_preload: {
  %s: %s
  %s: %s
}
`, s.Operator, s.SystemPublicKey(), resolverDir, s.SystemPublicKey(), s.System, s.AccountPublicKey(), s.Account)
}

// Push sends the account's current JWT to the servers nc is connected to
// (nc must be a system account user: system.creds), which store it and
// apply it at once: a revoked user is disconnected and cannot connect again.
func (s *Setup) Push(nc *nats.Conn, timeout time.Duration) error {
	msg, err := nc.Request("$SYS.REQ.CLAIMS.UPDATE", []byte(s.Account), timeout)
	if err != nil {
		return fmt.Errorf("push the account to the servers ($SYS.REQ.CLAIMS.UPDATE): %w", err)
	}
	var resp struct {
		Data *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("push the account: unreadable answer %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("push the account: the server refused it: %s (%d)", resp.Error.Description, resp.Error.Code)
	}
	return nil
}

// SystemCreds is the system user's credentials file, for Push.
func (s *Setup) SystemCreds() string { return filepath.Join(s.Dir, "system.creds") }

// Trust is what an embedded server needs to authenticate with this setup.
func (s *Setup) Trust() (operator *jwt.OperatorClaims, systemAccount string, accounts map[string]string, err error) {
	oc, err := jwt.DecodeOperatorClaims(s.Operator)
	if err != nil {
		return nil, "", nil, fmt.Errorf("operator JWT: %w", err)
	}
	return oc, s.SystemPublicKey(), map[string]string{s.SystemPublicKey(): s.System, s.AccountPublicKey(): s.Account}, nil
}
