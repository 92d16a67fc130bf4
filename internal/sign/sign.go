package sign

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"aead.dev/minisign"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package, all of the manifests.ErrRejected class.
var (
	// ErrBadSignature reports a signature that no trusted key verifies.
	ErrBadSignature = manifests.Rejection("signature not valid for any trusted key")
	// ErrUnsigned reports a missing signature.
	ErrUnsigned = manifests.Rejection("not signed")
	// ErrNoKeys reports an empty trust set.
	ErrNoKeys = manifests.Rejection("no trusted keys")
)

// ErrPublicKey reports a public key given where a secret key is needed.
var ErrPublicKey = errors.New("this is a public key; signing needs the secret key (the .key file strata key generate wrote beside it)")

// Bounds on what this package reads: a minisign signature or public key
// file is a few hundred bytes, so anything past these is not one.
const (
	// MaxSignatureSize bounds a detached signature.
	MaxSignatureSize = 64 << 10
	// MaxPublicKeySize bounds a public key file.
	MaxPublicKeySize = 64 << 10
	// MaxKeySize bounds a secret key file.
	MaxKeySize = 64 << 10
)

// Key is a private signing key.
type Key struct {
	priv minisign.PrivateKey
}

// KeySet is a set of trusted public keys.
type KeySet struct {
	keys []minisign.PublicKey
	any  bool
}

// Generate writes a new key pair to prefix.key (unencrypted, mode 0600) and
// prefix.pub. It refuses to overwrite either file and then writes neither.
func Generate(prefix string) error {
	for _, p := range []string{prefix + ".key", prefix + ".pub"} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("writing key: %w", &os.PathError{Op: "create", Path: p, Err: syscall.EEXIST})
		}
	}
	pub, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key: %w", err)
	}
	privText, err := priv.MarshalText()
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	pubText, _ := pub.MarshalText()
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{prefix + ".key", append(privText, '\n'), 0o600}, {prefix + ".pub", append(pubText, '\n'), 0o644}} {
		fd, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fmt.Errorf("writing key: %w", err)
		}
		if _, err := fd.Write(f.data); err != nil {
			fd.Close()
			return fmt.Errorf("writing key %s: %w", f.path, err)
		}
		if err := fd.Close(); err != nil {
			return fmt.Errorf("writing key %s: %w", f.path, err)
		}
	}
	return nil
}

// LoadKey reads an unencrypted minisign private key. An encrypted key is
// decrypted with the password in $STRATA_KEY_PASSWORD.
func LoadKey(path string) (*Key, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	if minisign.IsEncrypted(b) {
		pw, ok := os.LookupEnv("STRATA_KEY_PASSWORD")
		if !ok {
			return nil, fmt.Errorf("loading key %s: key is encrypted and STRATA_KEY_PASSWORD is not set", path)
		}
		k, err := minisign.DecryptKey(pw, b)
		if err != nil {
			return nil, fmt.Errorf("loading key %s: %w", path, err)
		}
		return &Key{priv: k}, nil
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("loading key %s: %w", path, err)
	}
	return k, nil
}

// ParseKey parses an unencrypted minisign private key.
func ParseKey(b []byte) (*Key, error) {
	var k minisign.PrivateKey
	if err := k.UnmarshalText(b); err != nil {
		if _, perr := ParsePublic(b); perr == nil {
			return nil, ErrPublicKey
		}
		return nil, err
	}
	return &Key{priv: k}, nil
}

// NewKey generates a key pair in memory.
func NewKey() (*Key, error) {
	_, priv, err := minisign.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	return &Key{priv: priv}, nil
}

// SecretText returns the key as an unencrypted minisign key file.
func (k *Key) SecretText() ([]byte, error) {
	b, err := k.priv.MarshalText()
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return append(b, '\n'), nil
}

// PublicText returns the key's public half as a minisign .pub file.
func (k *Key) PublicText() []byte {
	pub := k.priv.Public().(minisign.PublicKey)
	b, _ := pub.MarshalText()
	return append(b, '\n')
}

// PublicString returns the key's public half in one-line base64 form.
func (k *Key) PublicString() string {
	return k.priv.Public().(minisign.PublicKey).String()
}

// ID returns the key id as minisign prints it.
func (k *Key) ID() string { return fmt.Sprintf("%016X", k.priv.ID()) }

// Sign returns a detached minisign signature of msg. The trusted comment
// names what was signed, so `minisign -V` shows it.
func (k *Key) Sign(msg []byte, what string) []byte {
	return minisign.SignWithComments(k.priv, msg, what, "signature from strata")
}

// readKeyFile reads at most MaxKeySize bytes of the key file at path,
// which may be a pipe (a secret handed over by process substitution).
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loading key: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxKeySize+1))
	if err != nil {
		return nil, fmt.Errorf("loading key %s: %w", path, err)
	}
	if len(b) > MaxKeySize {
		return nil, fmt.Errorf("loading key %s: longer than %d bytes, not a minisign key", path, MaxKeySize)
	}
	return b, nil
}

// ParsePublic parses a public key in .pub file or one-line base64 form.
func ParsePublic(text []byte) (minisign.PublicKey, error) {
	var pk minisign.PublicKey
	t := bytes.TrimSpace(text)
	if !bytes.HasPrefix(t, []byte("untrusted comment:")) {
		t = append([]byte("untrusted comment: strata\n"), t...)
	}
	if err := pk.UnmarshalText(t); err != nil {
		return pk, err
	}
	return pk, nil
}

// NewKeySet builds a trust set from public keys in .pub or base64 form.
func NewKeySet(texts ...[]byte) (*KeySet, error) {
	ks := &KeySet{}
	for _, t := range texts {
		pk, err := ParsePublic(t)
		if err != nil {
			return nil, fmt.Errorf("parsing public key: %w", err)
		}
		ks.Add(pk)
	}
	return ks, nil
}

// Add puts pk into the set unless it is there already.
func (ks *KeySet) Add(pk minisign.PublicKey) {
	for _, k := range ks.keys {
		if k.Equal(pk) {
			return
		}
	}
	ks.keys = append(ks.keys, pk)
}

// Len returns the number of keys.
func (ks *KeySet) Len() int { return len(ks.keys) }

// Strings returns the keys in one-line base64 form, sorted.
func (ks *KeySet) Strings() []string {
	out := make([]string, 0, len(ks.keys))
	for _, k := range ks.keys {
		out = append(out, k.String())
	}
	sort.Strings(out)
	return out
}

// ErrSecretKey reports a secret key given where a public key is wanted.
var ErrSecretKey = errors.New("this is a secret key; give the public key (the .pub file strata key generate wrote beside it)")

// maxKeyFile bounds a key file read.
const maxKeyFile = 64 << 10

// LoadPublicFile reads one .pub file into a KeySet.
func LoadPublicFile(path string) (*KeySet, error) {
	b, err := safefile.ReadFollow(path, maxKeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading public key: %w", err)
	}
	ks, err := NewKeySet(b)
	if err != nil {
		var k minisign.PrivateKey
		if minisign.IsEncrypted(b) || k.UnmarshalText(b) == nil {
			return nil, fmt.Errorf("loading public key %s: %w", path, ErrSecretKey)
		}
		return nil, fmt.Errorf("loading public key %s: %w", path, err)
	}
	return ks, nil
}

// LoadDir reads every *.pub file of dir into a KeySet.
func LoadDir(dir string) (*KeySet, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.pub"))
	if err != nil {
		return nil, fmt.Errorf("loading keys from %s: %w", dir, err)
	}
	ks := &KeySet{}
	for _, n := range names {
		b, err := safefile.Read(n, MaxPublicKeySize)
		if err != nil {
			return nil, fmt.Errorf("loading keys from %s: %w", dir, err)
		}
		one, err := NewKeySet(b)
		if err != nil {
			return nil, fmt.Errorf("loading public key %s: %w", n, err)
		}
		for _, k := range one.keys {
			ks.Add(k)
		}
	}
	return ks, nil
}

// The trusted comments strata signs with: each names what was signed, so
// a signature of one document cannot stand for another (an index's for an
// overlay manifest, one overlay's for another version).
const IndexComment = "strata index"

// ImageComment is the trusted comment of an image manifest's signature.
func ImageComment(line, version string) string { return "strata image " + line + "-" + version }

// VerityComment is the trusted comment of an image's verity record's
// signature.
func VerityComment(line, version string) string { return "strata verity " + line + "-" + version }

// OverlayComment is the trusted comment of an overlay manifest's
// signature.
func OverlayComment(line, version string) string {
	return "strata overlay " + line + "-" + version
}

// Verify checks a detached signature of msg against the set and returns
// the id of the key that made it. An empty signature is ErrUnsigned; one no
// key verifies is ErrBadSignature (with the signing key id when readable).
func (ks *KeySet) Verify(msg, sig []byte) (string, error) {
	id, _, err := ks.VerifyComment(msg, sig)
	return id, err
}

// VerifyFor is Verify that also requires the signature's trusted comment
// (which the signature covers) to be want.
func (ks *KeySet) VerifyFor(msg, sig []byte, want string) (string, error) {
	id, comment, err := ks.VerifyComment(msg, sig)
	if err != nil {
		return "", err
	}
	if err := CheckComment(comment, want); err != nil {
		return "", err
	}
	return id, nil
}

// CheckComment refuses a verified signature whose trusted comment is not
// want: it was made for another document.
func CheckComment(comment, want string) error {
	if comment != want {
		return fmt.Errorf("%w: the signature is for %q, not %q", ErrBadSignature, comment, want)
	}
	return nil
}

// VerifyComment is Verify that also returns the signature's trusted
// comment, for callers that learn what it must say only after decoding
// msg (they check it with CheckComment).
func (ks *KeySet) VerifyComment(msg, sig []byte) (id, comment string, err error) {
	if len(bytes.TrimSpace(sig)) == 0 {
		return "", "", ErrUnsigned
	}
	if ks == nil || (len(ks.keys) == 0 && !ks.any) {
		return "", "", ErrNoKeys
	}
	var s minisign.Signature
	if err := s.UnmarshalText(sig); err != nil {
		return "", "", fmt.Errorf("%w: malformed signature: %v", ErrBadSignature, err)
	}
	if ks.any {
		return fmt.Sprintf("%016X", s.KeyID), s.TrustedComment, nil
	}
	for _, k := range ks.keys {
		if k.ID() == s.KeyID && minisign.Verify(k, msg, sig) {
			return fmt.Sprintf("%016X", k.ID()), s.TrustedComment, nil
		}
	}
	trusted := make([]string, 0, len(ks.keys))
	for _, k := range ks.keys {
		if k.ID() == s.KeyID {
			// The right key, the wrong bytes: the document changed after
			// it was signed (or the signature was made for another).
			return "", "", fmt.Errorf("%w: the signature by trusted key %016X does not match the document: it was changed after it was signed", ErrBadSignature, s.KeyID)
		}
		trusted = append(trusted, fmt.Sprintf("%016X", k.ID()))
	}
	return "", "", fmt.Errorf("%w: signed by key %016X, which is not trusted (trusted: %s)", ErrBadSignature, s.KeyID, strings.Join(trusted, ", "))
}

// PublicKeySet returns a KeySet holding only the key's public half.
func (k *Key) PublicKeySet() (*KeySet, error) {
	ks := &KeySet{}
	ks.Add(k.priv.Public().(minisign.PublicKey))
	return ks, nil
}

// Merge adds the keys of other (with its error, for chaining calls that
// return a KeySet).
func (ks *KeySet) Merge(other *KeySet, err error) error {
	if err != nil {
		return err
	}
	for _, k := range other.keys {
		ks.Add(k)
	}
	return nil
}

// Contains reports whether every key of other is in ks.
func (ks *KeySet) Contains(other *KeySet) bool {
	for _, o := range other.keys {
		found := false
		for _, k := range ks.keys {
			if k.Equal(o) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Files returns each key as a minisign .pub file keyed by "<KEYID>.pub".
func (ks *KeySet) Files() map[string][]byte {
	out := make(map[string][]byte, len(ks.keys))
	for _, k := range ks.keys {
		b, _ := k.MarshalText()
		out[fmt.Sprintf("%016X.pub", k.ID())] = append(b, '\n')
	}
	return out
}

// AnyKey returns a trust set that accepts any well-formed signature
// without checking it, for display commands that say so. Never use it to
// decide whether to apply anything.
func AnyKey() *KeySet { return &KeySet{any: true} }

// After returns the keys trusted after overlay m: ks itself unless m is a
// key rotation, else a new set without the keys m revokes and with those
// it adds. A revoked key ks does not hold is no error: an auditor's trust
// need not be the line's.
func (ks *KeySet) After(m *manifests.OverlayManifest) (*KeySet, error) {
	if m.Keys == nil || ks == nil || ks.any {
		return ks, nil
	}
	out := &KeySet{}
	for _, k := range ks.keys {
		if !slices.Contains(m.Keys.Revoke, fmt.Sprintf("%016X", k.ID())) {
			out.keys = append(out.keys, k)
		}
	}
	for _, pub := range m.Keys.Add {
		pk, err := ParsePublic([]byte(pub))
		if err != nil {
			return nil, fmt.Errorf("key rotation %s: %w", m.Version, err)
		}
		// Key files are named by id: a second key of the same id would
		// replace the first one's file on nodes while both stayed in
		// this set.
		for _, k := range out.keys {
			if k.ID() == pk.ID() && !k.Equal(pk) {
				return nil, fmt.Errorf("%w: key rotation %s adds a key whose id %016X names another trusted key", ErrBadSignature, m.Version, pk.ID())
			}
		}
		out.Add(pk)
	}
	if len(out.keys) == 0 {
		// key rotate refuses to make such a rotation; a reader refuses
		// one made by hand, which would leave a node trusting nothing,
		// every repository refused until it is reprovisioned.
		return nil, fmt.Errorf("%w: key rotation %s leaves no trusted key (it revokes %s and adds none)", manifests.ErrInvalid, m.Version, strings.Join(m.Keys.Revoke, ", "))
	}
	return out, nil
}

// SignatureKeyID returns the id of the key a minisign signature says made
// it, without verifying anything.
func SignatureKeyID(sig []byte) (string, error) {
	var s minisign.Signature
	if err := s.UnmarshalText(sig); err != nil {
		return "", fmt.Errorf("%w: malformed signature: %v", ErrBadSignature, err)
	}
	return fmt.Sprintf("%016X", s.KeyID), nil
}

// HasKey reports whether the set holds k's public half itself (not merely
// a key of the same id).
func (ks *KeySet) HasKey(k *Key) bool {
	pub := k.priv.Public().(minisign.PublicKey)
	for _, o := range ks.keys {
		if o.Equal(pub) {
			return true
		}
	}
	return false
}

// Has reports whether the set holds the key with id (as ID prints it).
func (ks *KeySet) Has(id string) bool {
	for _, k := range ks.keys {
		if fmt.Sprintf("%016X", k.ID()) == id {
			return true
		}
	}
	return false
}

// IDs returns the ids of the keys, sorted.
func (ks *KeySet) IDs() []string {
	out := make([]string, 0, len(ks.keys))
	for _, k := range ks.keys {
		out = append(out, fmt.Sprintf("%016X", k.ID()))
	}
	sort.Strings(out)
	return out
}

// WithHistory returns the keys an auditor verifies a line's images and
// overlays with: its own (trust) and the history keys (keys a rotation
// revoked since, which still verify what they signed then). Nil trust
// stays nil, meaning the repository's or node's own keys, whatever
// history holds.
func WithHistory(trust, history *KeySet) *KeySet {
	if trust == nil || history == nil {
		return trust
	}
	all := &KeySet{}
	_ = all.Merge(trust, nil)
	_ = all.Merge(history, nil)
	return all
}
