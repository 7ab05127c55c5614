// Package auth is the driven adapter that authenticates callers from the
// authorization file (SINK_AUTH_TOKEN_FILE): principals with hashed bearer
// tokens and/or client-certificate identities, and their grants. The file is
// reloaded when it changes (polling) or on demand (SIGHUP, see Watcher). It
// also serves the TLS material of the server (ServerTLS): the key pair and
// the client CA certificates, re-read when their files change.
package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// HashPrefix is the algorithm prefix of a token hash in the file.
const HashPrefix = "sha256:"

// HashToken returns the form of a token stored in the authorization file:
// "sha256:" and the hex SHA-256 of the token. Tokens are long random
// secrets (see GenerateToken), so a fast hash is enough.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return HashPrefix + hex.EncodeToString(sum[:])
}

// GenerateToken returns a new random token (32 random bytes, URL-safe base64).
func GenerateToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot generate a token: %w", err)
	}
	return "sink_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// File is the JSON form of the authorization file.
type File struct {
	Principals []FilePrincipal `json:"principals"`
}

// FilePrincipal is one principal of the file.
type FilePrincipal struct {
	Name string `json:"name"`
	// TokenHashes are HashToken outputs of the principal's bearer tokens
	// (several allow rotation without downtime).
	TokenHashes []string `json:"token_hashes,omitempty"`
	// CertificateIdentities are typed client-certificate identities that
	// authenticate as this principal under mutual TLS: "uri:<URI SAN>",
	// "dns:<DNS SAN>", "email:<e-mail SAN>" or "cn:<subject common name>".
	// An identity matches only a certificate name of its type.
	CertificateIdentities []string    `json:"certificate_identities,omitempty"`
	Grants                []FileGrant `json:"grants"`
}

// FileGrant is one grant of the file; empty patterns mean "*".
type FileGrant struct {
	Store     string   `json:"store,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	Dataset   string   `json:"dataset,omitempty"`
	Rights    []string `json:"rights"`
}

// table is one loaded version of the file.
type table struct {
	byToken    map[[sha256.Size]byte]*domain.Principal
	byIdentity map[string]*domain.Principal
	principals int
}

// Check parses and checks an authorization file, reporting every problem
// at once. Problems name principals and fields, never token hashes.
func Check(data []byte) error {
	_, err := parse(data)
	return err
}

func parse(data []byte) (*table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("cannot parse the authorization file as JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("cannot parse the authorization file: unexpected content after the JSON object")
	}
	t := &table{byToken: map[[sha256.Size]byte]*domain.Principal{}, byIdentity: map[string]*domain.Principal{}}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	names := map[string]bool{}
	for i, fp := range f.Principals {
		where := fmt.Sprintf("principals[%d]", i)
		if fp.Name == "" {
			add("%s: name must not be empty", where)
		} else {
			where = fmt.Sprintf("principals[%d] (%s)", i, fp.Name)
			if names[fp.Name] {
				add("%s: the name is used by another principal", where)
			}
			names[fp.Name] = true
		}
		p := &domain.Principal{Name: fp.Name}
		if len(fp.TokenHashes) == 0 && len(fp.CertificateIdentities) == 0 {
			add("%s: has neither token_hashes nor certificate_identities, so nobody can authenticate as it", where)
		}
		for j, h := range fp.TokenHashes {
			sum, err := decodeHash(h)
			if err != nil {
				add("%s: token_hashes[%d]: %v", where, j, err)
				continue
			}
			if other, dup := t.byToken[sum]; dup {
				add("%s: token_hashes[%d] is also a token of %q", where, j, other.Name)
				continue
			}
			t.byToken[sum] = p
		}
		for j, raw := range fp.CertificateIdentities {
			id, err := parseIdentity(raw)
			if err != nil {
				add("%s: certificate_identities[%d]: %v", where, j, err)
				continue
			}
			if other, dup := t.byIdentity[id]; dup {
				add("%s: certificate identity %q also belongs to %q", where, id, other.Name)
				continue
			}
			t.byIdentity[id] = p
		}
		for j, fg := range fp.Grants {
			g := domain.Grant{Store: orAll(fg.Store), Namespace: orAll(fg.Namespace), Dataset: orAll(fg.Dataset)}
			if len(fg.Rights) == 0 {
				add("%s: grants[%d]: rights must list at least one of read, write, delete", where, j)
			}
			for _, r := range fg.Rights {
				right, err := domain.ParseRight(r)
				if err != nil {
					add("%s: grants[%d]: %v", where, j, err)
				}
				g.Rights |= right
			}
			p.Grants = append(p.Grants, g)
		}
		t.principals++
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid authorization file:\n%w", err)
	}
	return t, nil
}

// Identity types of certificate_identities, in precedence order: when a
// certificate carries several identities declared in the file, the first
// one in this order (and, within a type, in certificate order) decides.
var identityTypes = []string{"uri", "dns", "email", "cn"}

// maxIdentityBytes bounds one certificate identity.
const maxIdentityBytes = 1024

// parseIdentity checks a typed identity of the file and returns its lookup
// key ("type:value"; DNS names in lower case, without a trailing dot).
func parseIdentity(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("must not be empty")
	}
	if len(raw) > maxIdentityBytes || !utf8.ValidString(raw) {
		return "", fmt.Errorf("must be valid UTF-8 of at most %d bytes", maxIdentityBytes)
	}
	typ, value, ok := strings.Cut(raw, ":")
	if !ok || !slices.Contains(identityTypes, typ) {
		var example string
		switch {
		case strings.Contains(raw, "://"):
			example = fmt.Sprintf("%q for a URI SAN", "uri:"+raw)
		case strings.Contains(raw, "@"):
			example = fmt.Sprintf("%q for an e-mail SAN", "email:"+raw)
		default:
			example = fmt.Sprintf("%q for a DNS SAN or %q for the subject common name", "dns:"+raw, "cn:"+raw)
		}
		return "", fmt.Errorf("%q has no type: write %s (types: uri, dns, email, cn; untyped identities are refused because a common name could pass for a DNS name)", raw, example)
	}
	if value == "" {
		return "", fmt.Errorf("%q has an empty %s value", raw, typ)
	}
	return identityKey(typ, value), nil
}

// identityKey normalises a typed identity: DNS names compare case-
// insensitively and without a trailing dot; the other types exactly.
func identityKey(typ, value string) string {
	if typ == "dns" {
		value = strings.TrimSuffix(strings.ToLower(value), ".")
	}
	return typ + ":" + value
}

func orAll(pattern string) string {
	if pattern == "" {
		return "*"
	}
	return pattern
}

func decodeHash(h string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(h, HashPrefix)
	if !ok {
		return sum, fmt.Errorf("must start with %q (create it with `sink hash-token`)", HashPrefix)
	}
	b, err := hex.DecodeString(hexPart)
	if err != nil || len(b) != sha256.Size {
		return sum, fmt.Errorf("must be %q followed by %d hex digits", HashPrefix, 2*sha256.Size)
	}
	copy(sum[:], b)
	return sum, nil
}

// Authenticator implements ports.Authenticator from the authorization file.
type Authenticator struct {
	path    string
	log     *slog.Logger
	current atomic.Pointer[table]

	mu      sync.Mutex // serializes reloads
	loaded  [sha256.Size]byte
	mode    os.FileMode // of the loaded version
	reloads atomic.Uint64
}

var _ ports.Authenticator = (*Authenticator)(nil)

// Load reads the authorization file at path and returns an authenticator
// over it. It fails when the file cannot be read or is invalid.
func Load(path string, log *slog.Logger) (*Authenticator, error) {
	a := &Authenticator{path: path, log: log}
	if _, err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload re-reads the file. It reports whether the content changed; on any
// error the previous version stays in force.
func (a *Authenticator) Reload() (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	data, err := os.ReadFile(a.path)
	if err != nil {
		return false, fmt.Errorf("cannot read the authorization file: %w", err)
	}
	sum := sha256.Sum256(data)
	mode := fileMode(a.path)
	if a.current.Load() != nil && sum == a.loaded {
		if mode != a.mode {
			a.mode = mode
			a.warnIfWritable()
		}
		return false, nil
	}
	t, err := parse(data)
	if err != nil {
		return false, fmt.Errorf("cannot load %s: %w", a.path, err)
	}
	a.current.Store(t)
	a.loaded = sum
	a.mode = mode
	a.reloads.Add(1)
	if a.log != nil {
		a.log.Info("loaded the authorization file", "path", a.path, "principals", t.principals)
	}
	a.warnIfWritable()
	return true, nil
}

// WritableByOthers are the permission bits that make the authorization
// file writable by its group or by others: whoever can write it can grant
// themselves every right.
const WritableByOthers os.FileMode = 0o022

// fileMode returns the permission bits of path (following symbolic links,
// as reading does); 0 when it cannot be read.
func fileMode(path string) os.FileMode {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Mode().Perm()
}

// warnIfWritable logs one warning when the loaded file is writable by its
// group or others; it runs when a version is loaded (start-up, reload) and
// when the mode changes, never on every poll.
func (a *Authenticator) warnIfWritable() {
	if a.log != nil && a.mode&WritableByOthers != 0 {
		a.log.Warn("the authorization file is writable by its group or by others; whoever can write it can grant any right: make it writable by its owner only (chmod go-w)",
			"path", a.path, "mode", fmt.Sprintf("%#o", a.mode))
	}
}

// Loads returns how many versions of the file have been loaded so far.
func (a *Authenticator) Loads() uint64 { return a.reloads.Load() }

// Watch reloads the file every interval until ctx ends, and whenever
// trigger delivers (for example on SIGHUP). Failed reloads are logged and
// the previous version stays in force.
func (a *Authenticator) Watch(ctx context.Context, interval time.Duration, trigger <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-trigger:
		}
		if _, err := a.Reload(); err != nil && a.log != nil {
			a.log.Error("cannot reload the authorization file; the previous version stays in force", "error", err)
		}
	}
}

// describeIdentities lists at most 4 identities of at most 100 bytes each
// (certificates may carry many long names), as valid UTF-8.
func describeIdentities(ids []string) string {
	const most, long = 4, 100
	var parts []string
	for i, id := range ids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-most))
			break
		}
		if len(id) > long {
			id = id[:long] + "…"
		}
		parts = append(parts, strings.ToValidUTF8(id, "\uFFFD"))
	}
	return strings.Join(parts, ", ")
}

// Authenticate implements ports.Authenticator. A bearer token takes
// precedence over a client certificate: a wrong token is refused even when
// the certificate is valid. Certificate identities are typed ("uri:…",
// "dns:…", "email:…", "cn:…", as the gRPC adapter presents them) and match
// only identities of the same type; when several are declared, the first in
// the order URI, DNS, e-mail, common name decides.
func (a *Authenticator) Authenticate(_ context.Context, c ports.Credentials) (*domain.Principal, error) {
	t := a.current.Load()
	if c.BearerToken != "" {
		if p, ok := t.byToken[sha256.Sum256([]byte(c.BearerToken))]; ok {
			return p, nil
		}
		return nil, domain.Errorf(domain.CodeUnauthenticated, "the bearer token is not valid")
	}
	// Certificate identities are typed ("dns:billing.internal"): one
	// matches only an identity of the same type, in precedence order.
	for _, typ := range identityTypes {
		for _, id := range c.CertificateIdentities {
			ctyp, value, ok := strings.Cut(id, ":")
			if !ok || ctyp != typ {
				continue
			}
			if p, ok := t.byIdentity[identityKey(typ, value)]; ok {
				return p, nil
			}
		}
	}
	if len(c.CertificateIdentities) > 0 {
		return nil, domain.Errorf(domain.CodeUnauthenticated, "the client certificate (%s) belongs to no principal", describeIdentities(c.CertificateIdentities))
	}
	return nil, domain.Errorf(domain.CodeUnauthenticated, "the request carries no credentials: send \"authorization: Bearer <token>\" or a client certificate")
}
